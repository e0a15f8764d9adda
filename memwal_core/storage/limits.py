"""Time limits on storage requests, one set for memwal's own requests and Lance's.

Without them a silent endpoint (one that accepts connections and never answers)
held a command for minutes: Lance's object store retries each request for up
to 180 s, and several requests run one after another. The limits are storage
options, so a user sets them as Lance documents them (`-o timeout=60s`) and
both memwal and Lance obey the same values. `timeout` bounds a request's whole
answer, not the wait for its next byte: an endpoint that trickles its answer
never lets an idle timeout fire.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from memwal_core.errors import BadInputError, quoted

# How long one request may take, its whole answer included (object_store's default is 30 s). Half
# that: an endpoint answering every request in 20 s held a status for 262 s under 30 s, while a
# healthy store answers metadata in milliseconds and moves a Lance part of a few MB in about a second.
DEFAULT_TIMEOUT = "15s"
DEFAULT_CONNECT_TIMEOUT = "5s"
# Lance retries a failed request until this many seconds have passed (its default is 180); memwal
# retries a throttled one (`503 SlowDown`) while an attempt can still end within it.
DEFAULT_RETRY_TIMEOUT = "50"
# And at most this many times (object_store's own default). Its backoff starts at 0.1 s and hardly
# grows, and Lance's throttle layer tries the whole again 3 times: Lance's requests ride out about
# 18 s of throttling at 10, 5 s at 3 (measured behind tests/support/proxy.py's ThrottlingProxy).
DEFAULT_MAX_RETRIES = "10"
# What Lance is handed when the user set nothing: the defaults above.
LANCE_DEFAULTS = {
    "timeout": DEFAULT_TIMEOUT,
    "connect_timeout": DEFAULT_CONNECT_TIMEOUT,
    "client_retry_timeout": DEFAULT_RETRY_TIMEOUT,
    "client_max_retries": DEFAULT_MAX_RETRIES,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_LONGEST = 24 * 3600.0


@dataclass(frozen=True)
class TimeLimits:
    """How long one request may take, and all attempts at it together (seconds)."""

    connect: float
    request: float
    total: float


def _seconds(options: Mapping[str, str], key: str, default: str, *, unit: str | None = None) -> float:
    raw = options.get(key, default)
    match = _DURATION.match(raw)
    if match is None or (unit is not None and match.group(2) is not None):
        shape = "a whole number of seconds" if unit else "a duration such as 30s, 500ms or 2m"
        raise BadInputError(f"storage option {key}={quoted(raw)} is not {shape}")
    value = float(match.group(1)) * _UNIT[match.group(2) or unit or "s"]
    if not math.isfinite(value) or value <= 0 or value > _LONGEST:
        raise BadInputError(f"storage option {key}={quoted(raw)} must be above 0 and at most 24h")
    return value


def time_limits(options: Mapping[str, str]) -> TimeLimits:
    """The limits `options` set, with the defaults for those it leaves out; bad values are bad input."""
    if "client_max_retries" in options and not options["client_max_retries"].strip().isdigit():
        raise BadInputError(
            f"storage option client_max_retries={quoted(options['client_max_retries'])} is not a whole number"
        )
    return TimeLimits(
        connect=_seconds(options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        request=_seconds(options, "timeout", DEFAULT_TIMEOUT),
        total=_seconds(options, "client_retry_timeout", DEFAULT_RETRY_TIMEOUT, unit="s"),
    )


def with_lance_defaults(options: Mapping[str, str]) -> dict[str, str]:
    """`options` plus the default limits it does not set, as Lance takes them."""
    return {**LANCE_DEFAULTS, **options}
