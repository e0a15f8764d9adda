"""A region's write-ahead log: where its last entry really is."""

from __future__ import annotations

from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, wal_entry_name
from memwal_core.format.regions import RegionManifest
from memwal_core.model.region_store import probe_run_end
from memwal_core.storage.object_store import ObjectStore


def last_wal_position(store: ObjectStore, manifest: RegionManifest) -> int:
    """The position of the region's newest WAL entry (0 if it has none).

    `wal_entry_position_last_seen` is only a hint the writer updates at its
    flushes, so probe forward from it with HEAD requests (WAL entries are
    named by bit-reversed position, like manifests). Entries up to
    `replay_after_wal_entry_position` may be garbage collected, so the probe
    never starts below it.
    """
    wal_dir = f"{MEM_WAL_DIR}/{manifest.region}/{REGION_WAL_DIR}"
    start = max(manifest.wal_entry_position_last_seen, manifest.replay_after_wal_entry_position)
    return probe_run_end(
        store,
        lambda position: f"{wal_dir}/{wal_entry_name(position)}",
        start,
        what=f"region {manifest.region} WAL entry",
        where=wal_dir,
    )
