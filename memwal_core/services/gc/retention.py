"""What GC keeps of a region's WAL and manifest versions so that a stalled writer or claim stays fenced.

Both are put-if-not-exists namespaces: a writer's next WAL entry goes to the
slot after its last one, a manifest change to the version after the one it
last wrote, and what stops a writer that stalled is finding that slot taken
(then Lance reads its epoch fenced). A freed slot lets the stale put succeed:
a WAL entry below the replay position, acknowledged and never read; or a
manifest version that forks the region's history. And a claim that stalled
finds the WAL's tip by probing forward from a hint it read before: a freed
slot on that path becomes its tip. No choice of slots serves all three (the
slot that stops a stalled writer is the one a stalled claim probes from), so
the rule is time: a slot is freed only once everything that could still
target it has been stalled for longer than the fence retention.

The anchor is the newest manifest version written more than the retention
ago. Every WAL entry at or below its `replay_after_wal_entry_position` was
written before it, and every version before it was superseded before it:
those may go. Whatever stalled before they were written has been stalled for
longer than the retention (docs/internals.md, "What stops a stalled writer").
Deletions are prefixes, so each run deletes from the oldest stored version's
replay position up to the anchor's, by name: the WAL is never listed, nor are
the manifest versions (the anchor is found by bisection, `anchor_version`).
The versions go only below the newest 10 too, so on a quiet table the oldest
stays while the anchor moves on: each run deleted again the ~900 positions
between them, long gone. So each run records where its deletes ended
(`_memwal_hints/wal_deleted.json`), and the next starts there. A record that is
lost or stale only makes a run delete names again; one from a run that failed
is not written; one past the anchor (a longer retention since) deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memwal_core.format.naming import WAL_DELETED_FILE
from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.records import read_record, write_record
from memwal_core.storage.object_store import ObjectStore


@dataclass(frozen=True)
class Retention:
    """The anchor version (None: no version is old enough), what it frees and what the retention keeps."""

    anchor: int | None
    wal_delete: range
    # Covered WAL positions younger than the retention, kept for it.
    wal_kept: int


def anchor_version(
    versions: range,
    created: Callable[[int], float | None],
    now: float,
    retention: float,
    known: Sequence[int] = (),
) -> int | None:
    """The newest of the stored `versions` written more than `retention` before `now` (None: none
    is), by bisection over their creation times: log2(n) HEADs, not a listing of n versions.
    `known`: versions, ascending, whose times cost nothing (a listing read them): the bisection
    starts between the newest of them old enough and the next one.

    A version is written only once the one before it exists, by the same store's clock (S3 sets
    an object's time itself; on local disk the kernel does), so times do not decrease with the
    version and the bisection finds the version a full listing would. Were they ever out of order
    (a table copied without its files' times), the version it returns still passed the test
    itself (each step keeps only such a version), so the anchor could only be older: GC keeps
    more, never frees a slot younger than the retention. A version gone meanwhile (another GC)
    is never the anchor.
    """

    def old(version: int) -> bool:
        time = created(version)
        return time is not None and now - time > retention

    low, high = versions.start, versions.stop - 1
    for version in known:
        if low < version <= high:
            if not old(version):
                high = version - 1
                break
            low = version
    if not old(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if old(middle):
            low = middle
        else:
            high = middle - 1
    return low


def plan_retention(
    versions: range,
    anchor: int | None,
    read: Callable[[int], RegionManifest],
    latest: RegionManifest,
    deleted_below: int | None = None,
) -> Retention:
    """What the `anchor` (`anchor_version`) frees of the WAL, the stored `versions` being [oldest, latest].

    `read` reads a stored version: the anchor's replay position bounds what
    may go, the oldest stored version's is where a previous run stopped, or
    `deleted_below` (the position the last run's deletes ended at), if later.
    """
    covered = latest.replay_after_wal_entry_position
    if anchor is None:
        return Retention(None, range(0), covered)
    oldest = versions.start
    end = read(anchor).replay_after_wal_entry_position + 1
    start = read(oldest).replay_after_wal_entry_position + 1 if oldest != anchor else end
    start = max(start, min(deleted_below or 0, end))
    return Retention(anchor, range(start, max(start, end)), covered - (end - 1))


def read_wal_deleted(store: ObjectStore) -> dict[str, int]:
    """Per region, the WAL position below which GC's last run left no covered entry (none recorded: the
    oldest stored manifest version tells)."""
    return {
        region: position
        for region, position in read_record(store, WAL_DELETED_FILE).items()
        if type(position) is int and position >= 1
    }


def write_wal_deleted(store: ObjectStore, deleted: Mapping[str, int]) -> None:
    write_record(store, WAL_DELETED_FILE, deleted, "where GC's WAL deletes ended")
