"""Which WAL entries of a region GC may delete.

Entries at positions `<= replay_after_wal_entry_position` are covered by
flushed generations, but a stalled, fenced writer could re-create a freed
position with its old epoch: keep a tail, young entries, and the newest
fence sentinel (docs/internals.md, "Garbage collection").
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.naming import wal_entry_name
from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.rules import (
    WAL_FENCE_SENTINEL,
    WAL_NOT_FLUSHED,
    WAL_TAIL,
    WAL_TOO_YOUNG,
    GcPolicy,
)
from memwal_core.storage.object_store import ObjectInfo


def wal_entry_metadata(data: bytes, *, where: str) -> dict[bytes, bytes]:
    """Schema metadata of a WAL entry (Arrow IPC stream); CorruptMetadataError names an unreadable one."""
    try:
        return dict(pa.ipc.open_stream(data).schema.metadata or {})
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid / ArrowIOError
        raise CorruptMetadataError(f"WAL entry {where} is not a readable Arrow IPC stream ({exc})") from exc


def plan_wal(
    store_read: Callable[[str], bytes],
    describe: Callable[[str], str],
    wal_dir: str,
    entries: dict[int, ObjectInfo],
    latest: RegionManifest,
    policy: GcPolicy,
    now: float,
) -> tuple[list[int], dict[str, int]]:
    """WAL positions to delete, and counts of the kept ones by reason."""
    covered = sorted(p for p in entries if p <= latest.replay_after_wal_entry_position)
    kept = {WAL_NOT_FLUSHED: len(entries) - len(covered)}
    split = max(len(covered) - policy.wal_tail, 0)
    kept[WAL_TAIL] = len(covered) - split
    candidates = [p for p in covered[:split] if now - entries[p].mtime >= policy.wal_min_age]
    kept[WAL_TOO_YOUNG] = split - len(candidates)
    kept[WAL_FENCE_SENTINEL] = 0
    if latest.writer_epoch > 1 and candidates:  # the first claim of a region writes no sentinel

        def epoch_and_sentinel(position: int) -> tuple[int, bool]:
            path = f"{wal_dir}/{wal_entry_name(position)}"
            meta = wal_entry_metadata(store_read(path), where=describe(path))
            return int(meta.get(b"writer_epoch", b"0") or 0), meta.get(b"fence_sentinel") == b"true"

        # The current epoch's sentinel is its first entry: binary search for where that epoch begins.
        lo, hi = 0, len(candidates)
        while lo < hi:
            mid = (lo + hi) // 2
            if epoch_and_sentinel(candidates[mid])[0] >= latest.writer_epoch:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(candidates) and epoch_and_sentinel(candidates[lo])[1]:
            kept[WAL_FENCE_SENTINEL] = 1
            del candidates[lo]
    return candidates, {reason: n for reason, n in kept.items() if n}
