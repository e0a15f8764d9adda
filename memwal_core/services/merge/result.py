"""What a merge round did: per region, per batch (one commit each), and in total."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from memwal_core.services.merge.plan import MergePlan, RegionFailure


def figures(result: RegionMergeResult | BatchResult) -> dict[str, Any]:
    """A result's fields as JSON values, seconds rounded to 0.1 ms."""
    values = {f.name: getattr(result, f.name) for f in fields(result)}
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def generation_range(generations: list[int]) -> str:
    """`3` for one generation, `3..5` for several."""
    return str(generations[0]) if len(generations) == 1 else f"{generations[0]}..{generations[-1]}"


@dataclass(frozen=True)
class RegionMergeResult:
    """What one region's prefix contributed to a batch commit.

    `rows_upserted` is the region's live rows (each one inserted or updated);
    `rows_deleted` its tombstoned keys. Lance counts rows actually deleted only
    per commit: see the batch.
    """

    region: str
    merged_generations: list[int]
    rows_upserted: int
    rows_deleted: int
    rows_read: int
    bytes_read: int
    seconds_collapse: float
    seconds_commit: float
    table_version: int
    replans: int
    batch: int

    def to_json(self) -> dict[str, Any]:
        return figures(self)


@dataclass(frozen=True)
class BatchResult:
    """One commit of a round: the regions it merged and Lance's figures for it."""

    batch: int
    regions: list[str]
    generations: int
    rows_upserted: int
    rows_deleted: int
    rows_read: int
    bytes_read: int
    seconds_collapse: float
    seconds_commit: float
    table_version: int
    commit_form: str
    use_index: bool
    commit_reason: str
    replans: int

    def to_json(self) -> dict[str, Any]:
        return {**figures(self), "seconds": round(self.seconds_collapse + self.seconds_commit, 4)}


@dataclass(frozen=True)
class MergeResult:
    """The outcome of one merge round over a table."""

    table: str
    engine: str
    planned_at_version: int
    regions: list[RegionMergeResult]
    failures: list[RegionFailure]
    seconds_plan: float
    seconds_total: float
    batches: list[BatchResult] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    dry_run: bool = False
    plan: MergePlan | None = field(default=None, repr=False)
    planned_batches: list[dict[str, Any]] = field(default_factory=list)
    max_batch_rows: int = 0
    max_batch_bytes: int = 0

    @property
    def generations_merged(self) -> int:
        return sum(len(r.merged_generations) for r in self.regions)

    def to_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "table": self.table,
            "engine": self.engine,
            "dry_run": self.dry_run,
            "planned_at_version": self.planned_at_version,
            "regions": [r.to_json() for r in self.regions],
            "batches": [b.to_json() for b in self.batches],
            "failures": [{"region": f.region, "error": f.error} for f in self.failures],
            "busy_regions": self.busy,
            "generations_merged": self.generations_merged,
            "regions_merged": len({r.region for r in self.regions}),
            "commits": len(self.batches),
            "rows_upserted": sum(b.rows_upserted for b in self.batches),
            "rows_deleted": sum(b.rows_deleted for b in self.batches),
            "max_batch_rows": self.max_batch_rows,
            "max_batch_bytes": self.max_batch_bytes,
            "seconds_plan": round(self.seconds_plan, 4),
            "seconds_total": round(self.seconds_total, 4),
        }
        if self.dry_run and self.plan is not None:
            payload["plan"] = self.plan.to_json()
            payload["batches"] = self.planned_batches
        return payload

    def to_text(self) -> str:
        lines = [f"merge of {self.table} ({self.engine} engine){' [dry run]' if self.dry_run else ''}"]
        if self.dry_run and self.plan is not None:
            for p in self.plan.regions:
                lines.append(f"  {p.region}  would merge {[g.generation for g in p.generations]}")
            for planned in self.planned_batches:
                lines.append(
                    f"  batch {planned['batch']}: would commit {len(planned['regions'])} region(s), "
                    f"{planned['generations']} generation(s), {planned['rows']} rows"
                )
        for r in self.regions:
            lines.append(
                f"  {r.region}  merged {generation_range(r.merged_generations)}  "
                f"upserted {r.rows_upserted}  deleted {r.rows_deleted}  table v{r.table_version}"
            )
        for b in self.batches:
            lines.append(
                f"  batch {b.batch}: {len(b.regions)} region(s), {b.rows_upserted} upserted, "
                f"{b.rows_deleted} deleted in one commit ({b.seconds_commit:.2f} s) -> table v{b.table_version}"
            )
        for f in self.failures:
            lines.append(f"  {f.region}  FAILED: {f.error}")
        for region in self.busy:
            lines.append(f"  {region}  skipped: another merger holds it")
        if not self.regions and not self.failures and not (self.dry_run and self.plan and self.plan.regions):
            lines.append("  nothing to merge")
        return "\n".join(lines)
