"""`status`: regions, merge progress and backlog of a table. Changes nothing."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memwal_core.arguments import checked
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.regions import RegionManifest
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import SeenBacklog, TableBacklog, backlog_of
from memwal_core.services.result import ServiceResult
from memwal_core.services.snapshot.stored import read_hinted


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


@dataclass(frozen=True)
class TableStatus(ServiceResult):
    """The status of every region of a table at one table version (`read_version`); changes nothing."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"version": "read_version"}

    primary_key: list[str]
    regions: list[RegionStatus]
    index_catchup: dict[str, dict[str, int]]
    maintained_indexes: list[str]
    maintain_all_indexes: bool

    @property
    def pending_total(self) -> int:
        return sum(len(r.pending_generations) for r in self.regions)

    def computed_json(self) -> dict[str, Any]:
        return {"pending_generations_total": self.pending_total}


@checked
def status(table: MemWalTable) -> TableStatus:
    """Read the status of every region (region manifests are read in parallel)."""
    started = time.perf_counter()
    version = table.latest_version()
    details = table.index_details(version)
    return status_of(table, version, details, read_hinted(table, details), started)


def status_and_backlog(table: MemWalTable) -> tuple[TableStatus, TableBacklog]:
    """The status and every region's backlog from one read of the region manifests.

    The backlog adds one LIST per region with pending generations (the age of its oldest).
    """
    started = time.perf_counter()
    version = table.latest_version()
    details = table.index_details(version)
    manifests = read_hinted(table, details)
    found = status_of(table, version, details, manifests, started)
    return found, backlog_of(table, version, details, manifests)


def status_since(table: MemWalTable, read: SeenBacklog, started: float) -> TableStatus:
    """The status at a backlog read: the regions it did not re-read are read now, from its versions."""
    missing = [r for r in read.manifest_versions if r not in read.manifests]
    manifests = {**read.manifests, **table.read_regions(missing, known=read.manifest_versions)}
    return status_of(table, read.backlog.table_version, read.details, manifests, started)


def status_of(
    table: MemWalTable,
    version: int,
    details: IndexDetails,
    manifests: Mapping[str, RegionManifest | None],
    started: float,
) -> TableStatus:
    """The status from region manifests already read at table version `version` (read since `started`)."""
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
        read_version=version,
        seconds=time.perf_counter() - started,
        primary_key=list(details.primary_key),
        regions=regions,
        index_catchup={name: dict(sorted(p.items())) for name, p in sorted(details.index_catchup.items())},
        maintained_indexes=list(details.maintained_indexes),
        maintain_all_indexes=details.maintain_all_indexes,
    )
