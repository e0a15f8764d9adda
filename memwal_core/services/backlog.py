"""`backlog`: what each region still has to merge, how big and how old it is.

Merge lag is read latency (every unmerged generation is read by every LSM
read), so the orchestrator watches three numbers per region: pending
generations, their bytes, and the age of the oldest one. The age is the
modification time of the oldest pending generation's first dataset
manifest: one LIST per region that has a backlog, none for the others.

A caller that polls (the Dagster sensor) passes what it saw last time
(`backlog_since`): a region whose manifest has no newer version (one HEAD)
and whose merge progress did not move keeps its backlog, so a tick reads
only what changed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import MEM_WAL_DIR, TABLE_VERSIONS_DIR
from memwal_core.format.regions import RegionManifest
from memwal_core.model.table import MemWalTable
from memwal_core.services.snapshot.stored import read_hinted, snapshot_hints


@dataclass(frozen=True)
class RegionBacklog:
    """One region's unmerged flushed generations."""

    region: str
    merged_generation: int
    latest_flushed: int
    pending: tuple[int, ...]
    pending_bytes: int
    oldest_pending_created_at: float | None

    def to_list(self) -> list[object]:
        """A compact JSON form (for a sensor's cursor)."""
        return [
            self.merged_generation,
            self.latest_flushed,
            list(self.pending),
            self.pending_bytes,
            self.oldest_pending_created_at,
        ]

    @classmethod
    def from_list(cls, region: str, data: Sequence[Any]) -> RegionBacklog:
        merged, latest, pending, size, created = data
        return cls(region, int(merged), int(latest), tuple(int(g) for g in pending), int(size), created)

    def oldest_pending_age(self, now: float) -> float:
        """Seconds since the oldest pending generation was flushed (0 without a backlog)."""
        if self.oldest_pending_created_at is None:
            return 0.0
        return max(0.0, now - self.oldest_pending_created_at)


@dataclass(frozen=True)
class TableBacklog:
    """Every region's backlog read at one table version: what the orchestrator watches, not a report."""

    table: str
    table_version: int
    regions: list[RegionBacklog]
    read_at: float

    @property
    def pending_total(self) -> int:
        return sum(len(r.pending) for r in self.regions)

    @property
    def max_pending(self) -> int:
        return max((len(r.pending) for r in self.regions), default=0)

    @property
    def max_age_seconds(self) -> float:
        return max((r.oldest_pending_age(self.read_at) for r in self.regions), default=0.0)

    @property
    def complete_as_of(self) -> float:
        """The time before which every flushed generation is merged: the read's time less the longest lag."""
        return self.read_at - self.max_age_seconds


def backlog(table: MemWalTable, regions: Iterable[str] | None = None) -> TableBacklog:
    """Every region's backlog (or the named regions') at the latest table version (changes nothing)."""
    version = table.latest_version()
    details = table.index_details(version)
    return backlog_of(table, version, details, read_hinted(table, details, regions))


def region_backlog(table: MemWalTable, manifest: RegionManifest, merged: int) -> RegionBacklog:
    """One region's backlog from its latest manifest (one LIST if it has pending generations)."""
    region = manifest.region
    pending = [g for g in manifest.generations if g.generation > merged]
    created = None
    if pending:
        listing = table.store.list_files(f"{MEM_WAL_DIR}/{region}/{pending[0].path}/{TABLE_VERSIONS_DIR}")
        created = min((info.mtime for info in listing), default=None)
    return RegionBacklog(
        region=region,
        merged_generation=merged,
        latest_flushed=max((g.generation for g in manifest.generations), default=merged),
        pending=tuple(g.generation for g in pending),
        pending_bytes=sum(g.in_memory_bytes or 0 for g in pending),
        oldest_pending_created_at=created,
    )


def backlog_of(
    table: MemWalTable, version: int, details: IndexDetails, manifests: Mapping[str, RegionManifest | None]
) -> TableBacklog:
    """The backlog from region manifests already read (a region without a manifest has none)."""
    read = [m for _region, m in sorted(manifests.items()) if m is not None]
    found = table.store.map(lambda m: region_backlog(table, m, details.merged_generation(m.region)), read)
    return TableBacklog(table.uri, version, found, time.time())


@dataclass(frozen=True)
class SeenBacklog:
    """Every region's backlog as a poller saw it, with the manifest version each was read from.

    `details`: the MemWAL details it was read at; `manifests`: the regions it read in full
    (None: no manifest yet), the others kept what the poller saw before.
    """

    backlog: TableBacklog
    manifest_versions: dict[str, int]
    details: IndexDetails
    manifests: dict[str, RegionManifest | None]


def backlog_since(
    table: MemWalTable, seen: Mapping[str, tuple[int, RegionBacklog]], *, dataset: Any = None
) -> SeenBacklog:
    """Every region's backlog, re-reading only the regions that changed since `seen`.

    `seen`: per region, the manifest version and backlog of an earlier read. A region
    whose merge progress is unchanged and whose manifest has no newer version costs one
    HEAD; any other region is read in full, starting from its seen version (or, for a
    region not seen before, the stored region snapshot's). `dataset`: the latest version, already open.
    """
    version = dataset.version if dataset is not None else table.latest_version()
    details = table.index_details(version)
    ids = table.region_ids()
    hints: Mapping[str, int] = {}
    if any(region not in seen for region in ids):
        hints = snapshot_hints(table, details)

    # A region seen before whose merge progress is unchanged costs one HEAD (of its next manifest
    # version), probed for all such regions at once; only the others are read.
    same = [r for r in ids if r in seen and seen[r][1].merged_generation == details.merged_generation(r)]
    moved = table.store.exists_many([table.region_store(r).next_path(seen[r][0]) for r in same])
    kept = {r: seen[r] for r, m in zip(same, moved, strict=True) if not m}
    changed = [r for r in ids if r not in kept]
    found = table.store.map(
        lambda r: table.read_region(r, seen[r][0] if r in seen else hints.get(r)), changed
    )
    manifests: dict[str, RegionManifest | None] = dict(zip(changed, found, strict=True))
    read = [m for _r, m in sorted(manifests.items()) if m is not None]
    fresh = table.store.map(lambda m: region_backlog(table, m, details.merged_generation(m.region)), read)
    regions = sorted([*(b for _v, b in kept.values()), *fresh], key=lambda b: b.region)
    versions = {r: v for r, (v, _b) in kept.items()} | {m.region: m.version for m in read}
    backlog = TableBacklog(table.uri, version, regions, time.time())
    return SeenBacklog(backlog, versions, details, manifests)
