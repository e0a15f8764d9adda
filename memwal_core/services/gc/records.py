"""GC's records in `_memwal_hints/`: per region, a number a run leaves for the next, so it need not
find it again with requests that grow with what GC keeps (when to scan a WAL folder, `wal_temps.py`;
the oldest stored manifest version, `versions.py`; where the WAL deletes ended, `retention.py`).

Each record is one small object per table, read once per plan and written once per run that changed
it (never by a dry run). It is only a hint: one that is lost, garbled or stale costs the next run
requests, never a wrong decision (a WAL position recorded too high could only keep entries).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from typing import TypeVar

from memwal_core.errors import MemwalError
from memwal_core.storage.object_store import ObjectStore

log = logging.getLogger(__name__)
N = TypeVar("N", int, float)


def read_record(store: ObjectStore, path: str) -> dict[str, int | float]:
    """The record's numbers by region; none when it is absent or garbled (entries that are no number drop out)."""
    try:
        record = json.loads(store.read(path))
    except (MemwalError, ValueError):
        return {}
    regions = record.get("regions") if isinstance(record, dict) else None
    if not isinstance(regions, dict):
        return {}
    return {
        region: number
        for region, number in regions.items()
        if isinstance(region, str) and isinstance(number, int | float) and not isinstance(number, bool)
    }


def write_record(store: ObjectStore, path: str, regions: Mapping[str, N], what: str) -> None:
    """Write the record; a failure is logged and dropped (the next run finds `what` again)."""
    record = {"regions": dict(sorted(regions.items()))}
    try:
        store.write(path, json.dumps(record, separators=(",", ":")).encode())
    except MemwalError as exc:
        log.warning("%s was not recorded: %s", what, exc)


def record_after(
    before: Mapping[str, N], listed: Collection[str], done: Mapping[str, N]
) -> dict[str, N] | None:
    """The record once a run is done: the regions still `listed` keep their number, those it `done`
    take the new one; None if that changes nothing."""
    after = {region: number for region, number in before.items() if region in listed} | dict(done)
    return None if after == before else after
