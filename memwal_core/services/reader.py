"""A MemWAL-aware read: the base table plus exactly the flushed generations it does not yet hold.

Lance's LSM readers read whatever region snapshots they are given and do
not skip merged generations, so a merged generation passed to them can let
a stale row win over a newer base-table value. The rule (format doc): skip
generations `<= merged[region]`; for a read that uses a base-table index,
skip only `<= min(merged, caught_up[index])`, since the index does not yet
see the merged rows past its catch-up. Pending generations are never
skipped. Region state comes from the latest region manifests (a current
read) or from the stored region snapshot (eventually consistent, cheaper:
no region manifest is read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwal_core.arguments import checked
from memwal_core.errors import CorruptMetadataError, NotFoundError
from memwal_core.model.indexes import read_maintained
from memwal_core.model.table import MemWalTable
from memwal_core.services.snapshot.stored import read_hinted, read_stored_snapshot

if TYPE_CHECKING:
    from lance.mem_wal import LsmPointLookupPlanner, LsmScanner, ShardSnapshot


@dataclass(frozen=True)
class RegionRead:
    """One region's part of a read: the generations to read on top of the base table.

    `field_values` is the region value its manifest records (how keys are routed to it) and
    `pending_rows` the rows its generations hold as recorded; a read from the stored snapshot
    knows neither (empty, None).
    """

    region: str
    spec_id: int
    current_generation: int
    base_holds_through: int
    generations: tuple[tuple[int, str], ...]
    field_values: tuple[tuple[str, bytes], ...] = ()
    pending_rows: int | None = None


@dataclass(frozen=True)
class ReadPlan:
    """What a read covers, pinned to one table version (base data and merge progress agree)."""

    table_uri: str
    table_version: int
    index: str | None
    source: str
    regions: tuple[RegionRead, ...]


@checked
def plan_read(
    table: MemWalTable, *, index: str | None = None, from_snapshot: bool = False, version: int | None = None
) -> ReadPlan:
    """Which generations of which regions a read must add to the base table at its latest version (or `version`).

    At an older version, merge progress is that version's: what was merged since is read from
    the generations, which GC keeps while the version is retained.
    """
    details = table.index_details(table.dataset().version if version is None else version)
    if not table.primary_key:
        raise CorruptMetadataError(f"table {table.uri} has no primary key; MemWAL-aware reads need one")
    if index is not None and index not in read_maintained(table, details).names:
        raise NotFoundError(f"table {table.uri} has no index {index!r} maintained by the MemWAL")
    caught_up = details.index_catchup.get(index, {}) if index is not None else None

    def holds_through(region: str) -> int:
        merged = details.merged_generation(region)
        return merged if caught_up is None else min(merged, caught_up.get(region, 0))

    regions = []
    if from_snapshot:
        for r in read_stored_snapshot(table, details).rows:
            bound = holds_through(r.region)
            pending_generations = tuple((g, p) for g, p in r.generations if g > bound)
            regions.append(RegionRead(r.region, r.spec_id, r.current_generation, bound, pending_generations))
    else:
        for region, m in sorted(read_hinted(table, details).items()):
            if m is None:
                continue
            bound = holds_through(region)
            pending = [g for g in m.generations if g.generation > bound]
            rows = [g.physical_rows for g in pending]
            regions.append(
                RegionRead(
                    region,
                    m.spec_id,
                    m.current_generation,
                    bound,
                    tuple((g.generation, g.path) for g in pending),
                    m.field_values,
                    None if None in rows else sum(r or 0 for r in rows),
                )
            )
    return ReadPlan(
        table.uri,
        details.table_version,
        index,
        "snapshot" if from_snapshot else "manifests",
        tuple(regions),
    )


def region_snapshots(plan: ReadPlan) -> list[ShardSnapshot]:
    """Lance's region snapshots for the plan (regions with nothing to add are left out)."""
    from lance.mem_wal import ShardSnapshot

    snapshots = []
    for r in plan.regions:
        if not r.generations:
            continue
        snapshot = (
            ShardSnapshot(r.region).with_spec_id(r.spec_id).with_current_generation(r.current_generation)
        )
        for generation, path in r.generations:
            snapshot = snapshot.with_sstable(generation, path)
        snapshots.append(snapshot)
    return snapshots


@checked
def lsm_scanner(table: MemWalTable, plan: ReadPlan) -> LsmScanner:
    """Lance's LSM scanner over the plan: newest row per primary key across base and generations."""
    from lance.mem_wal import LsmScanner

    return LsmScanner.from_snapshots(table.dataset(plan.table_version), region_snapshots(plan))


@checked
def point_lookup(table: MemWalTable, plan: ReadPlan) -> LsmPointLookupPlanner:
    """Lance's primary-key point lookup planner over the plan.

    Lance 14's planner opens generations without the table's storage options: on S3 it needs the
    credentials and endpoint in the environment (docs/lance-issues.md).
    """
    from lance.mem_wal import LsmPointLookupPlanner

    return LsmPointLookupPlanner(table.dataset(plan.table_version), region_snapshots(plan), table.primary_key)
