"""`status`: regions, merge progress and backlog of a table. Changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memwal_core.format.index_details import IndexDetails
from memwal_core.format.regions import RegionManifest
from memwal_core.services.backlog import TableBacklog, backlog_of
from memwal_core.table import MemWalTable


@dataclass(frozen=True)
class RegionStatus:
    """One region as its latest manifest and the table's merge progress describe it."""

    region: str
    manifest_version: int
    writer_epoch: int
    current_generation: int
    flushed_generations: list[int]
    merged_generation: int
    pending_generations: list[int]
    replay_after_wal_entry_position: int
    sealed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "manifest_version": self.manifest_version,
            "writer_epoch": self.writer_epoch,
            "current_generation": self.current_generation,
            "flushed_generations": self.flushed_generations,
            "merged_generation": self.merged_generation,
            "pending_generations": self.pending_generations,
            "replay_after_wal_entry_position": self.replay_after_wal_entry_position,
            "sealed": self.sealed,
        }


@dataclass(frozen=True)
class TableStatus:
    """The status of every region of a table at one table version."""

    table: str
    version: int
    primary_key: list[str]
    regions: list[RegionStatus]
    index_catchup: dict[str, dict[str, int]]
    maintained_indexes: list[str]
    maintain_all_indexes: bool

    @property
    def pending_total(self) -> int:
        return sum(len(r.pending_generations) for r in self.regions)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "primary_key": self.primary_key,
            "regions": [r.to_json() for r in self.regions],
            "index_catchup": self.index_catchup,
            "maintained_indexes": self.maintained_indexes,
            "maintain_all_indexes": self.maintain_all_indexes,
            "pending_generations_total": self.pending_total,
        }

    def to_text(self) -> str:
        lines = [
            f"table {self.table}  version {self.version}  primary key {', '.join(self.primary_key) or '(none)'}",
            f"{len(self.regions)} region(s), {self.pending_total} pending generation(s)",
        ]
        for r in self.regions:
            pending = ",".join(map(str, r.pending_generations)) or "-"
            lines.append(
                f"  {r.region}  manifest v{r.manifest_version}  epoch {r.writer_epoch}  "
                f"merged {r.merged_generation}  flushed {len(r.flushed_generations)}  pending {pending}"
                + ("  SEALED" if r.sealed else "")
            )
        for index, progress in sorted(self.index_catchup.items()):
            caught = ", ".join(f"{region[:8]}:{g}" for region, g in sorted(progress.items())) or "-"
            lines.append(f"  index {index}: caught up {caught}")
        return "\n".join(lines)


def status(table: MemWalTable) -> TableStatus:
    """Read the status of every region (region manifests are read in parallel)."""
    version = table.dataset().version
    return status_of(table, version, table.index_details(version), table.read_regions())


def status_and_backlog(table: MemWalTable) -> tuple[TableStatus, TableBacklog]:
    """The status and every region's backlog from one read of the region manifests.

    The backlog adds one LIST per region with pending generations (the age of its oldest).
    """
    version = table.dataset().version
    details = table.index_details(version)
    manifests = table.read_regions()
    return status_of(table, version, details, manifests), backlog_of(table, version, details, manifests)


def status_of(
    table: MemWalTable, version: int, details: IndexDetails, manifests: Mapping[str, RegionManifest | None]
) -> TableStatus:
    """The status from region manifests already read at table version `version`."""
    regions = []
    for region, manifest in sorted(manifests.items()):
        merged = details.merged_generation(region)
        flushed = manifest.generation_numbers if manifest else []
        regions.append(
            RegionStatus(
                region=region,
                manifest_version=manifest.version if manifest else 0,
                writer_epoch=manifest.writer_epoch if manifest else 0,
                current_generation=manifest.current_generation if manifest else 0,
                flushed_generations=flushed,
                merged_generation=merged,
                pending_generations=[g for g in flushed if g > merged],
                replay_after_wal_entry_position=manifest.replay_after_wal_entry_position if manifest else 0,
                sealed=manifest.sealed if manifest else False,
            )
        )
    return TableStatus(
        table=table.uri,
        version=version,
        primary_key=table.primary_key,
        regions=regions,
        index_catchup={name: dict(sorted(p.items())) for name, p in sorted(details.index_catchup.items())},
        maintained_indexes=list(details.maintained_indexes),
        maintain_all_indexes=details.maintain_all_indexes,
    )
