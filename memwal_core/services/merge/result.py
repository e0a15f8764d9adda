"""What a merge round did: per region, per batch (one commit each), and in total."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memwal_core.services.backlog import RegionBacklog
from memwal_core.services.merge.plan import MergePlan
from memwal_core.services.result import NOT_IN_JSON, JsonRecord, ServiceResult


@dataclass(frozen=True)
class RegionMergeResult:
    """What one region's prefix contributed to a batch commit.

    `rows_upserted` is the region's live rows (each one inserted or updated);
    `tombstones` the keys its generations delete, and `rows_deleted` the base
    rows those deletes removed (a key deleted but never merged removes none).
    Each sums over the regions of a batch to the batch's figure.
    """

    region: str
    merged_generations: list[int]
    rows_upserted: int
    rows_deleted: int
    tombstones: int
    rows_read: int
    bytes_read: int
    seconds_collapse: float
    seconds_commit: float
    table_version: int
    replans: int
    batch: int


@dataclass(frozen=True)
class BatchResult(JsonRecord):
    """One commit of a round: the regions it merged, Lance's figures for it (rows upserted, base rows
    deleted) and the keys its regions' generations delete (`tombstones`)."""

    batch: int
    regions: list[str]
    generations: int
    rows_upserted: int
    rows_deleted: int
    tombstones: int
    rows_read: int
    bytes_read: int
    seconds_collapse: float
    seconds_commit: float
    table_version: int
    commit_form: str
    use_index: bool
    commit_reason: str
    replans: int

    def computed_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds_collapse + self.seconds_commit}


@dataclass(frozen=True)
class MergeResult(ServiceResult):
    """The outcome of one merge round over a table; `new_version` is its last commit's."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {
        "planned_at_version": "read_version",
        "seconds_total": "seconds",
    }

    engine: str
    regions: list[RegionMergeResult]
    seconds_plan: float
    # Why the round ran on `engine`: "named", or its backlog against the Spark threshold.
    engine_reason: str = "named"
    batches: list[BatchResult] = field(default_factory=list)
    busy_regions: list[str] = field(default_factory=list)
    # Regions left for the next round because the round ran out of its time (`max_seconds`).
    deferred_regions: list[str] = field(default_factory=list)
    plan: MergePlan | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    planned_batches: list[dict[str, Any]] = field(default_factory=list, metadata=NOT_IN_JSON)
    max_batch_rows: int = 0
    max_batch_bytes: int = 0
    # The round's storage requests through memwal's store, by operation (Lance's are not seen there).
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def generations_merged(self) -> int:
        return sum(len(r.merged_generations) for r in self.regions)

    def merged_through(self) -> dict[str, int]:
        """The generation the round merged each region it merged to (its last batch's target)."""
        through: dict[str, int] = {}
        for r in self.regions:
            through[r.region] = max(through.get(r.region, 0), r.merged_generations[-1])
        return through

    def planned_readings(self) -> dict[str, tuple[int, RegionBacklog]]:
        """Each merged region's manifest version and backlog as the round planned them: what
        `backlog_after` needs to observe the regions after the round without reading them again."""
        merged = {r.region for r in self.regions}
        return {
            p.region: (
                p.manifest_version,
                RegionBacklog(
                    p.region,
                    p.merged_before,
                    p.latest_flushed,
                    tuple(g.generation for g in p.generations),
                    p.bytes,
                    None,
                ),
            )
            for p in (self.plan.regions if self.plan else ())
            if p.region in merged
        }

    def computed_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "generations_merged": self.generations_merged,
            "regions_merged": len({r.region for r in self.regions}),
            "commits": len(self.batches),
            "rows_upserted": sum(b.rows_upserted for b in self.batches),
            "rows_deleted": sum(b.rows_deleted for b in self.batches),
            "tombstones": sum(b.tombstones for b in self.batches),
        }
        if self.dry_run and self.plan is not None:
            payload["plan"] = self.plan.summary()
            payload["batches"] = self.planned_batches
        return payload
