"""Recording how a maintenance service ended, for monitoring (see `memwal_core.model.outcomes`).

`recorded(service, succeeded)` wraps a service function: after a real run
(never a dry run) it records success or the failures (per region where the
service works per region, one line per distinct error), and after a run that
raised, the error's first line. A run that failed because the storage itself
is out of reach records nothing: the record could not be written either, and
retrying would hold the caller for the storage's whole retry time. Nor does
one refused for bad input (arguments, a table without MemWAL, a corrupt
manifest): such a command writes nothing at all, and the exporter reports a
table it cannot read by itself (`memwal_table_up 0`).

Each record adds up the run's storage requests: the table's store count is
reset as the run starts and read as its record is written, failed runs too.
Requests made before (opening the table) and Lance's own are not in it. So do
the throttled answers among them and the time waited on them, which every run's
result (a dry run's too) also carries (`throttled`).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from memwal_core.errors import BadInputError, MemwalError, first_line
from memwal_core.model.outcomes import Stored, record_outcome, unrecordable
from memwal_core.services.result import ServiceResult, grouped

F = TypeVar("F", bound=Callable[..., Any])


def _nothing(_result: Any) -> Iterable[str]:
    return ()


def recorded(
    service: str,
    succeeded: Callable[[Any], Iterable[str]] = _nothing,
    stored: Callable[[Any], Mapping[str, Stored] | None] | None = None,
) -> Callable[[F], F]:
    """Record the outcome of every real run of the decorated service; `succeeded`: regions it finished;
    `stored`: what the table holds by kind, as the run found it (None: not found this time)."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            table = bound.arguments["table"]
            requests = table.store.stats
            requests.reset()
            if bound.arguments.get("dry_run", False):
                dry: ServiceResult = function(*args, **kwargs)
                return dry.with_throttled(requests.throttling.snapshot())
            try:
                result: ServiceResult = function(*args, **kwargs)
                result = result.with_throttled(requests.throttling.snapshot())
            except MemwalError as exc:
                if not unrecordable(exc) and not isinstance(exc, BadInputError):
                    record_outcome(
                        table.store,
                        service,
                        at=time.time(),
                        ok=False,
                        error=first_line(exc),
                        requests=requests,
                    )
                raise
            groups = grouped(result.failures)
            record_outcome(
                table.store,
                service,
                at=time.time(),
                ok=not groups,
                error=groups[0].message if groups else None,
                failed={f.region: f.error for f in result.failures if f.region is not None},
                succeeded=succeeded(result),
                requests=requests,
                stored=stored(result) if stored is not None else None,
            )
            return result

        return run  # type: ignore[return-value]

    return decorate
