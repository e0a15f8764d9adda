"""`backlog`: what each region still has to merge, how big and how old it is.

Merge lag is read latency (every unmerged generation is read by every LSM
read), so the orchestrator watches three numbers per region: pending
generations, their bytes, and the age of the oldest one. The age is the
modification time of the oldest pending generation's first dataset
manifest: one LIST per region that has a backlog, none for the others.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import MEM_WAL_DIR, TABLE_VERSIONS_DIR
from memwal_core.format.regions import RegionManifest
from memwal_core.services.snapshot.stored import read_hinted
from memwal_core.table import MemWalTable


@dataclass(frozen=True)
class RegionBacklog:
    """One region's unmerged flushed generations."""

    region: str
    merged_generation: int
    latest_flushed: int
    pending: tuple[int, ...]
    pending_bytes: int
    oldest_pending_created_at: float | None

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


def backlog(table: MemWalTable, regions: Iterable[str] | None = None) -> TableBacklog:
    """Every region's backlog (or the named regions') at the latest table version (changes nothing)."""
    version = table.dataset().version
    details = table.index_details(version)
    return backlog_of(table, version, details, read_hinted(table, details, regions))


def backlog_of(
    table: MemWalTable, version: int, details: IndexDetails, manifests: Mapping[str, RegionManifest | None]
) -> TableBacklog:
    """The backlog from region manifests already read (a region without a manifest has none)."""
    read = {r: m for r, m in manifests.items() if m is not None}

    def region_backlog(region: str) -> RegionBacklog:
        manifest = read[region]
        merged = details.merged_generation(region)
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

    found = table.store.map(region_backlog, sorted(read))
    return TableBacklog(table.uri, version, found, time.time())
