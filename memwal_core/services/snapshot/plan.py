"""Snapshot plan: every region's latest manifest and real last WAL position, read in parallel."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from memwal_core.errors import BadInputError
from memwal_core.format.region_snapshot import RegionSnapshotRow, decode_field_value, region_field_types
from memwal_core.format.regions import RegionManifest
from memwal_core.model.table import MemWalTable
from memwal_core.model.wal import last_wal_position
from memwal_core.services.defaults import DEFAULT_INLINE_THRESHOLD
from memwal_core.services.snapshot.stored import read_hinted


@dataclass(frozen=True)
class SnapshotPlan:
    """The regions as read, before merge progress is re-read under the details lease."""

    table_uri: str
    read_at_millis: int
    regions: tuple[RegionSnapshotRow, ...]
    stale_wal_hints: tuple[str, ...]
    inline_threshold: int

    @property
    def inline(self) -> bool:
        """Small snapshots go inline in the index details; larger ones to their own file."""
        return len(self.regions) <= self.inline_threshold


def snapshot_row(
    manifest: RegionManifest, wal_position: int, field_types: dict[str, Any]
) -> RegionSnapshotRow:
    return RegionSnapshotRow(
        region=manifest.region,
        version=manifest.version,
        spec_id=manifest.spec_id,
        writer_epoch=manifest.writer_epoch,
        replay_after_wal_entry_position=manifest.replay_after_wal_entry_position,
        wal_entry_position_last_seen=wal_position,
        current_generation=manifest.current_generation,
        merged_generation=0,
        generations=tuple((g.generation, g.path) for g in manifest.generations),
        field_values=tuple(
            (
                field_id,
                decode_field_value(raw, field_types[field_id], field_id=field_id, region=manifest.region),
            )
            for field_id, raw in manifest.field_values
            if field_id in field_types
        ),
    )


def plan_snapshot(table: MemWalTable, *, inline_threshold: int = DEFAULT_INLINE_THRESHOLD) -> SnapshotPlan:
    """Read every region's latest manifest and probe for its last WAL entry, all in parallel."""
    if inline_threshold < 0:
        raise BadInputError(f"--inline-threshold must be at least 0, not {inline_threshold}")
    read_at = int(time.time() * 1000)
    details = table.index_details()
    field_types = region_field_types(details.to_proto().sharding_specs)
    manifests = [m for _region, m in sorted(read_hinted(table, details).items()) if m is not None]
    positions = table.store.map(lambda m: last_wal_position(table.store, m), manifests)
    rows = tuple(snapshot_row(m, p, field_types) for m, p in zip(manifests, positions, strict=True))
    stale = tuple(
        m.region for m, p in zip(manifests, positions, strict=True) if p > m.wal_entry_position_last_seen
    )
    return SnapshotPlan(table.uri, read_at, rows, stale, inline_threshold)
