"""The last outcome of each maintenance service, recorded in the table's own storage.

Whoever runs a merge, GC or snapshot (the CLI, a Dagster run, a script) leaves
one small JSON record at `_memwal_outcomes/{service}.json`: when it ended,
whether it succeeded, its first error line, the last success before it, and
for services that work per region, each region that keeps failing (how many
runs in a row, since when). Monitoring (`memwal metrics`) reads these
records instead of the orchestrator's database, so a table's outcomes are the
same whoever ran the service.

Each record also sums what the service's runs cost: their storage requests
through memwal's own store, by kind, and the store's "slow down" answers to them
with the seconds they waited (Lance's own requests are not seen there).
GC's carries what the table holds by kind as its last run listed it (`stored`,
`stored_at`). Records written before these fields read as zero and nothing.

A record is a report, not a lock: two services of the same kind ending at the
same time keep the last writer's record. Recording never fails the service
that ran: a record that cannot be written is logged and dropped.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memwal_core.errors import MemwalError, NotFoundError, StorageError, first_line
from memwal_core.format.naming import OUTCOME_DIR
from memwal_core.storage.object_store import ObjectStore, RequestStats, by_kind
from memwal_core.storage.retry import NOT_THROTTLED, Throttled

log = logging.getLogger(__name__)

MERGE = "merge"
GC = "gc"
SNAPSHOT = "snapshot"
CATCHUP = "catchup"
SERVICES = (MERGE, GC, SNAPSHOT, CATCHUP)


@dataclass(frozen=True)
class RegionFailing:
    """A region that failed in `runs` runs in a row of one service, the first of them at `since`."""

    runs: int
    since: float
    error: str


@dataclass(frozen=True)
class Stored:
    """Objects of one kind a table holds, and their bytes (None: not known without listing them)."""

    objects: int
    bytes: int | None


@dataclass(frozen=True)
class Outcome:
    """How one service last ended on a table."""

    service: str
    at: float
    ok: bool
    error: str | None = None
    # The end of the last run that succeeded (this one, if it did); None if none is recorded.
    last_success_at: float | None = None
    failing: Mapping[str, RegionFailing] = field(default_factory=dict)
    # Storage requests of every recorded run through memwal's store, by kind (`by_kind`).
    requests: Mapping[str, int] = field(default_factory=dict)
    # What the table holds by kind as the last run that listed every region found it, and when (GC's).
    stored: Mapping[str, Stored] = field(default_factory=dict)
    stored_at: float | None = None
    # Throttled answers to those requests, and the seconds waited on them, summed like `requests`.
    throttled: Throttled = NOT_THROTTLED

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "at": self.at,
            "ok": self.ok,
            "error": self.error,
            "last_success_at": self.last_success_at,
            "failing": {r: [f.runs, f.since, f.error] for r, f in sorted(self.failing.items())},
            "requests": dict(sorted(self.requests.items())),
            "stored": {k: [s.objects, s.bytes] for k, s in sorted(self.stored.items())},
            "stored_at": self.stored_at,
            "throttled": [self.throttled.responses, self.throttled.seconds],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        failing = {r: RegionFailing(int(v[0]), float(v[1]), str(v[2])) for r, v in data["failing"].items()}
        stored = {
            str(k): Stored(int(v[0]), None if v[1] is None else int(v[1]))
            for k, v in data.get("stored", {}).items()
        }
        responses, seconds = data.get("throttled", (0, 0.0))
        return cls(
            service=str(data["service"]),
            at=float(data["at"]),
            ok=bool(data["ok"]),
            error=data["error"],
            last_success_at=data["last_success_at"],
            failing=failing,
            requests={str(k): int(v) for k, v in data.get("requests", {}).items()},
            stored=stored,
            stored_at=None if data.get("stored_at") is None else float(data["stored_at"]),
            throttled=Throttled(int(responses), float(seconds)),
        )

    def then(
        self,
        *,
        at: float,
        ok: bool,
        error: str | None,
        failed: Mapping[str, str],
        succeeded: Iterable[str],
        requests: Mapping[str, int] | None = None,
        stored: Mapping[str, Stored] | None = None,
        throttled: Throttled = NOT_THROTTLED,
    ) -> Outcome:
        """The record after another run: regions that failed again count up, those that worked drop out;
        the run's `requests` (by kind) and `throttled` add up; `stored`, if the run found it, replaces the last."""
        cleared = set(succeeded)
        failing = {r: f for r, f in self.failing.items() if r not in cleared and r not in failed}
        for region, message in failed.items():
            before = self.failing.get(region)
            runs, since = (before.runs + 1, before.since) if before else (1, at)
            failing[region] = RegionFailing(runs, since, message)
        last_success = at if ok else self.last_success_at
        total = Counter(self.requests)
        total.update(requests or {})
        found, found_at = (self.stored, self.stored_at) if stored is None else (stored, at)
        return Outcome(
            self.service,
            at,
            ok,
            error,
            last_success,
            failing,
            dict(total),
            found,
            found_at,
            self.throttled + throttled,
        )


def outcome_path(service: str) -> str:
    return f"{OUTCOME_DIR}/{service}.json"


def read_outcome(store: ObjectStore, service: str) -> Outcome | None:
    """The service's record, or None if it never ran here (or its record cannot be decoded)."""
    try:
        raw = store.read(outcome_path(service))
    except NotFoundError:
        return None
    try:
        return Outcome.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("%s cannot be read (%s); ignored", store.describe(outcome_path(service)), first_line(exc))
        return None


def record_outcome(
    store: ObjectStore,
    service: str,
    *,
    at: float,
    ok: bool,
    error: str | None = None,
    failed: Mapping[str, str] | None = None,
    succeeded: Iterable[str] = (),
    requests: RequestStats | None = None,
    stored: Mapping[str, Stored] | None = None,
) -> Outcome | None:
    """Write the service's record after a run; the record, or None if storage refused it (logged).

    `requests`: the store's count, reset as the run started; read once the record is read, so the
    record's own read is in it, and its write is added as one PUT.
    """
    try:
        before = read_outcome(store, service) or Outcome(service, 0.0, True)
        run: dict[str, int] = {}
        throttled = NOT_THROTTLED
        if requests is not None:  # and this record's write: one PUT
            run = by_kind(requests.snapshot())
            run["PUT"] += 1
            throttled = requests.throttling.snapshot()
        after = before.then(
            at=at,
            ok=ok,
            error=error,
            failed=failed or {},
            succeeded=succeeded,
            requests=run,
            stored=stored,
            throttled=throttled,
        )
        store.write(outcome_path(service), json.dumps(after.to_json(), sort_keys=True).encode())
    except (MemwalError, OSError) as exc:
        log.warning("the %s outcome of %s was not recorded: %s", service, store.describe(""), first_line(exc))
        return None
    return after


def unrecordable(error: BaseException) -> bool:
    """Whether a failure means the storage itself is out of reach: then no record can be written."""
    return isinstance(error, StorageError)
