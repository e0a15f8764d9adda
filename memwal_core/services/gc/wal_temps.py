"""Abandoned uploads in a region's WAL folder (local disk), and when GC next needs to scan for them.

On local disk Lance writes a WAL entry through a temp file (`{entry}.tmp.{hex}`, itself
renamed from `...#1` once written) that a writer killed mid-put leaves behind; GC deletes
one once it is `GcPolicy.abandoned_after_seconds` old. Finding them reads every name in
the folder, which holds a week of entries (the fence retention): a cost that grows with
what GC keeps. A scan at time t sees every temp file made before t, and one made later
cannot be old enough before t plus that age. So after each scan GC records, per region,
the earliest time a scan can find one to delete (`_memwal_hints/wal_temp_scans.json`):
t plus the age, or sooner when a temp file it found is younger than the age. Until then it
does not read the folder, and deletes what it would delete scanning every run. A record that
is lost, garbled or not written (a dry run, a region whose deletes failed) only makes the
next run scan again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memwal_core.format.naming import WAL_TEMP_SCANS_FILE
from memwal_core.services.gc.records import read_record, write_record
from memwal_core.storage.object_store import ObjectInfo, ObjectStore

# A file's time comes from the kernel's clock, which may lag this process's by a tick: a scan's
# time is taken this much earlier, so a temp file made just after it is never due before it.
CLOCK_LAG_SECONDS = 1.0


@dataclass(frozen=True)
class WalTempScan:
    """One scan of a region's WAL folder: when it began, and the temp files it found."""

    at: float
    files: tuple[ObjectInfo, ...]

    @classmethod
    def read(cls, store: ObjectStore, wal_dir: str, now: float) -> WalTempScan:
        """The folder's names alone: only the temp files are stat'ed (a HEAD each), never the entries.
        `now`: when the plan began, by this host's clock (`plan_gc`)."""
        at = now - CLOCK_LAG_SECONDS
        found = [store.head(f"{wal_dir}/{name}") for name in store.list_names(wal_dir) if ".tmp" in name]
        # None: renamed or linked into place since it was listed.
        return cls(at, tuple(info for info in found if info is not None))

    def decide(self, now: float, abandoned_after: float) -> tuple[list[str], float]:
        """The temp files old enough to delete at `now` (paths), and when a scan can next find one
        once they are gone: when the oldest one left, or one made after this scan, is old enough."""
        old = [info.path for info in self.files if now - info.mtime > abandoned_after]
        kept = [info.mtime for info in self.files if now - info.mtime <= abandoned_after]
        return old, min([self.at, *kept]) + abandoned_after


def scan_due(due: float | None, now: float, abandoned_after: float) -> bool:
    """Whether a region's WAL folder is scanned at `now`. A due more than the age ahead was not
    written by this clock (it was set back, or the record is garbled): scanned too."""
    return due is None or not now < due <= now + abandoned_after


def read_dues(store: ObjectStore) -> dict[str, float]:
    """Per region, when GC next scans its WAL folder; none recorded (absent or garbled): every region now."""
    return {region: float(due) for region, due in read_record(store, WAL_TEMP_SCANS_FILE).items()}


def write_dues(store: ObjectStore, dues: Mapping[str, float]) -> None:
    """Record when GC next scans each region's WAL folder (a failure only makes the next run scan again)."""
    write_record(store, WAL_TEMP_SCANS_FILE, dues, "when GC next scans for abandoned WAL uploads")
