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
replay position up to the anchor's, by name: the WAL is never listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.rules import GcPolicy


@dataclass(frozen=True)
class Retention:
    """The anchor version (None: no version is old enough), what it frees and what the retention keeps."""

    anchor: int | None
    wal_delete: range
    # Covered WAL positions younger than the retention, kept for it.
    wal_kept: int


def plan_retention(
    stored: dict[int, float],
    read: Callable[[int], RegionManifest],
    latest: RegionManifest,
    policy: GcPolicy,
    now: float,
) -> Retention:
    """The anchor among the `stored` versions (version -> creation time), and what it frees.

    `read` reads a stored version: the anchor's replay position bounds what
    may go, the oldest stored version's is where the previous run stopped.
    """
    covered = latest.replay_after_wal_entry_position
    retention = policy.fence_retention_seconds
    old = [v for v, created in stored.items() if v <= latest.version and now - created > retention]
    if not old:
        return Retention(None, range(0), covered)
    anchor, oldest = max(old), min(stored)
    end = read(anchor).replay_after_wal_entry_position + 1
    start = read(oldest).replay_after_wal_entry_position + 1 if oldest != anchor else end
    return Retention(anchor, range(start, max(start, end)), covered - (end - 1))
