"""The store's clock, and the check that this host's clock agrees with it.

memwal judges ages by comparing a time with now: GC a generation's grace period and
the fence retention, from the times the store gave its objects; a lease's expiry,
which its holder wrote by its own clock and every other host reads by its own. A host
whose clock is off judges wrong: 2 hours ahead, GC deleted directories pruned seconds
before; 10 minutes behind, a merger's lease looked expired to every other merger while
it held it. So:

- GC takes now from the store: the time the store gives an object GC writes as it starts
  (`store_time`: one PUT and one HEAD of `_memwal_hints/clock.json`).
- Every reading of the store's clock is checked against this host's: when they differ by
  more than `MAX_CLOCK_SKEW_SECONDS`, memwal refuses with a one-line ClockSkewError (GC
  deletes nothing, a lease is not written, or given back at once).
- A lease is written only by a host found within the bound in the last `CHECK_SECONDS`
  (`ensure_checked`), or whose write is read back anyway (`Lease._verified`), which
  then checks the record's own stored time: renewals at the default TTL cost nothing more.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from weakref import WeakKeyDictionary

from memwal_core.errors import ClockSkewError, StorageError
from memwal_core.format.naming import CLOCK_FILE
from memwal_core.storage.object_store import ObjectStore

# Clocks kept by NTP agree within milliseconds; S3 itself refuses requests signed 15 minutes off. A lease
# holder may be taken over up to twice this early by another host's clock, so it stays well under its TTL.
MAX_CLOCK_SKEW_SECONDS = 30.0
# Stored times are whole seconds on S3 (Last-Modified), and up to a tick behind this process's clock on
# local disk (the kernel's coarse clock): a time that much before the write is no skew.
STORE_TIME_RESOLUTION = 1.0
# A lease writes without reading the store's clock again this long after the last reading.
CHECK_SECONDS = 30.0

_checked: WeakKeyDictionary[ObjectStore, float] = WeakKeyDictionary()
# One reading at a time: the leases a merge takes in parallel share it.
_lock = threading.Lock()


def check_clock(store: ObjectStore, stored: float, before: float, after: float, where: str) -> None:
    """ClockSkewError unless `stored`, a time the store set between this host's times `before` and
    `after` (on the object `where`), agrees with this host's clock within the bound."""
    if stored > after:
        skew = stored - after  # this host is behind
    elif stored < before - STORE_TIME_RESOLUTION:
        skew = stored - before + STORE_TIME_RESOLUTION  # this host is ahead
    else:
        skew = 0.0
    if abs(skew) > MAX_CLOCK_SKEW_SECONDS:
        side = "behind" if skew > 0 else "ahead of"
        raise ClockSkewError(
            f"this host's clock is {abs(skew):.0f} s {side} the store's (by the stored time of {where}), "
            f"more than the {MAX_CLOCK_SKEW_SECONDS:g} s memwal allows: refused; set this host's clock "
            f"(NTP) and run again"
        )
    _checked[store] = time.monotonic()


def store_time(store: ObjectStore) -> float:
    """The store's time now: the time it gives an object written here (one PUT, one HEAD), checked
    against this host's clock. An earlier answer than the truth, never a later one (S3's seconds)."""
    before = time.time()
    store.write(CLOCK_FILE, json.dumps({"host": socket.gethostname(), "written_at": before}).encode())
    info = store.head(CLOCK_FILE)
    after = time.time()
    if info is None:
        raise StorageError(f"{store.describe(CLOCK_FILE)} was gone right after it was written")
    check_clock(store, info.mtime, before, after, store.describe(CLOCK_FILE))
    return info.mtime


def ensure_checked(store: ObjectStore) -> None:
    """Read the store's clock (`store_time`) unless this host's was found within the bound in the
    last `CHECK_SECONDS`; ClockSkewError if it is not."""
    with _lock:
        last = _checked.get(store)
        if last is None or time.monotonic() - last > CHECK_SECONDS:
            store_time(store)
