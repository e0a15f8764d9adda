"""`merge`: plan, execute (collapse) and commit every region's pending generations.

Regions are merged one after another and independently: a failure in one is
reported and the others go on. A stale commit (another merger won) makes us
re-plan that region from the progress now recorded; retryable commit
conflicts are retried with bounded backoff.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memwal_core.errors import MemwalError
from memwal_core.model.details_lease import details_lease
from memwal_core.model.lease import Lease, LeaseBusyError
from memwal_core.services.merge.collapse import Collapsed
from memwal_core.services.merge.commit import (
    StaleMergeError,
    commit_region,
    reapply_deletes,
    same_region_commits,
)
from memwal_core.services.merge.engine import LocalEngine, MergeEngine
from memwal_core.services.merge.plan import MergePlan, RegionFailure, RegionMergePlan, plan_merge, region_plan
from memwal_core.storage.retry import RetryPolicy
from memwal_core.table import MemWalTable

log = logging.getLogger(__name__)

# Below this many source rows, Lance's key index beats a full scan of the key column.
INDEXED_MERGE_MAX_ROWS = 1000
MAX_REPLANS = 8
# A merge renews its lease before each commit; a holder silent this long is presumed dead.
DEFAULT_LEASE_TTL = 300.0


@dataclass(frozen=True)
class RegionMergeResult:
    """What one region's merge did."""

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

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "merged_generations": self.merged_generations,
            "rows_upserted": self.rows_upserted,
            "rows_deleted": self.rows_deleted,
            "rows_read": self.rows_read,
            "bytes_read": self.bytes_read,
            "seconds_collapse": round(self.seconds_collapse, 4),
            "seconds_commit": round(self.seconds_commit, 4),
            "table_version": self.table_version,
            "replans": self.replans,
        }


@dataclass(frozen=True)
class MergeResult:
    """The outcome of one merge run over a table."""

    table: str
    engine: str
    planned_at_version: int
    regions: list[RegionMergeResult]
    failures: list[RegionFailure]
    seconds_plan: float
    seconds_total: float
    busy: list[str] = field(default_factory=list)
    dry_run: bool = False
    plan: MergePlan | None = field(default=None, repr=False)

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
            "failures": [{"region": f.region, "error": f.error} for f in self.failures],
            "busy_regions": self.busy,
            "generations_merged": self.generations_merged,
            "rows_upserted": sum(r.rows_upserted for r in self.regions),
            "rows_deleted": sum(r.rows_deleted for r in self.regions),
            "seconds_plan": round(self.seconds_plan, 4),
            "seconds_total": round(self.seconds_total, 4),
        }
        if self.dry_run and self.plan is not None:
            payload["plan"] = self.plan.to_json()
        return payload

    def to_text(self) -> str:
        lines = [f"merge of {self.table} ({self.engine} engine){' [dry run]' if self.dry_run else ''}"]
        if self.dry_run and self.plan is not None:
            for p in self.plan.regions:
                lines.append(f"  {p.region}  would merge {[g.generation for g in p.generations]}")
        for r in self.regions:
            lines.append(
                f"  {r.region}  merged {r.merged_generations[0]}..{r.merged_generations[-1]}  "
                f"upserted {r.rows_upserted}  deleted {r.rows_deleted}  table v{r.table_version}"
            )
        for f in self.failures:
            lines.append(f"  {f.region}  FAILED: {f.error}")
        for region in self.busy:
            lines.append(f"  {region}  skipped: another merger holds it")
        if not self.regions and not self.failures and not (self.dry_run and self.plan and self.plan.regions):
            lines.append("  nothing to merge")
        return "\n".join(lines)


def has_key_index(dataset: Any, primary_key: tuple[str, ...]) -> bool:
    """Whether a scalar index covers the primary key (only then can a merge use one)."""
    return any(list(index.field_names or []) == list(primary_key) for index in dataset.describe_indices())


def _replan_region(table: MemWalTable, region: str, max_generations: int | None) -> RegionMergePlan | None:
    """The region's pending prefix from the progress recorded now."""
    details = table.index_details()
    manifest = table.region_store(region).read_latest()
    return region_plan(table, manifest, details.merged_generation(region), max_generations)


def _is_retryable_conflict(exc: BaseException) -> bool:
    """Lance's own retries (conflict_retries) ran out; a fresh attempt may succeed."""
    return isinstance(exc, OSError) and "Too many concurrent writers" in str(exc)


def commit_checked(
    table: MemWalTable,
    dataset: Any,
    primary_key: tuple[str, ...],
    plan: RegionMergePlan,
    collapsed: Collapsed,
    *,
    use_index: bool,
) -> tuple[dict[str, int], int]:
    """Commit one region, then re-apply its deletes if a same-region commit slipped in between.

    The merge lease rules that out while leases are honoured; this is the
    backstop for an expired lease or a merger that ignores leases.
    """
    read_version = int(dataset.version)
    stats = commit_region(
        dataset,
        primary_key,
        plan.region,
        plan.target_generation,
        collapsed.open_live(),
        collapsed.deleted_keys,
        use_index=use_index,
    )
    version = int(dataset.version)
    intervening = same_region_commits(table, plan.region, read_version, version)
    if intervening:
        log.warning(
            "region %s: versions %s merged the same region concurrently; re-applying %d deletes",
            plan.region,
            intervening,
            collapsed.deleted_keys.num_rows,
        )
        repaired = reapply_deletes(dataset, primary_key, collapsed.deleted_keys)
        stats = {**stats, "num_deleted_rows": stats.get("num_deleted_rows", 0) + repaired}
        version = int(dataset.version)
    return stats, version


def merge_region(
    table: MemWalTable,
    plan: RegionMergePlan,
    primary_key: tuple[str, ...],
    engine: MergeEngine,
    *,
    max_generations: int | None,
    retry: RetryPolicy,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    lease_wait: float = 0.0,
) -> RegionMergeResult | None:
    """Merge one region's plan under its merge lease; re-plan on stale progress.

    Returns None if another merger merged everything first. Raises
    LeaseBusyError if another live merger holds the region's lease.
    """
    lease = Lease(table.store, f"merge-{plan.region}", ttl=lease_ttl).acquire(wait=lease_wait)
    try:
        replans = 0
        current: RegionMergePlan | None = plan
        while current is not None:
            dataset = table.dataset()
            started = time.perf_counter()
            collapsed = engine.collapse(current, primary_key, dataset.schema, table.storage_options)
            collapsed_at = time.perf_counter()
            use_index = (
                collapsed.live_rows + collapsed.deleted_keys.num_rows <= INDEXED_MERGE_MAX_ROWS
                and has_key_index(dataset, primary_key)
            )

            def commit(
                target: RegionMergePlan = current,
                collapsed: Collapsed = collapsed,
                use_index: bool = use_index,
            ) -> tuple[dict[str, int], int]:
                lease.ensure()
                # The snapshot builder rewrites the progress this commit records: never both at once.
                with details_lease(table.store, ttl=lease_ttl):
                    return commit_checked(
                        table, table.dataset(), primary_key, target, collapsed, use_index=use_index
                    )

            try:  # from here on, the engine's staged output is released whatever happens
                stats, version = retry.run(commit, _is_retryable_conflict)
            except StaleMergeError:
                replans += 1
                if replans > MAX_REPLANS:
                    raise
                log.info("region %s: another merger got there first; re-planning", current.region)
                current = _replan_region(table, current.region, max_generations)
                continue
            finally:
                collapsed.release()
            return RegionMergeResult(
                region=current.region,
                merged_generations=[g.generation for g in current.generations],
                rows_upserted=stats.get("num_inserted_rows", 0) + stats.get("num_updated_rows", 0),
                rows_deleted=stats.get("num_deleted_rows", 0),
                rows_read=collapsed.rows_read,
                bytes_read=collapsed.bytes_read,
                seconds_collapse=collapsed_at - started,
                seconds_commit=time.perf_counter() - collapsed_at,
                table_version=version,
                replans=replans,
            )
        return None
    finally:
        lease.release()


def merge(
    table: MemWalTable,
    *,
    regions: Iterable[str] | None = None,
    max_generations: int | None = None,
    engine: MergeEngine | None = None,
    dry_run: bool = False,
    retry: RetryPolicy | None = None,
    lease_wait: float = 0.0,
    progress: Callable[[int, int, str], None] | None = None,
) -> MergeResult:
    """Merge pending generations of every region (or the named ones), in ascending order.

    `progress(done, total, region)` is called after each region, for progress bars.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     result = merge(table, max_generations=8)
        ...     print(result.to_json()["generations_merged"])
    """
    engine = engine or LocalEngine()
    retry = retry or RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)
    started = time.perf_counter()
    plan = plan_merge(table, regions=regions, max_generations=max_generations)
    planned = time.perf_counter()
    results: list[RegionMergeResult] = []
    failures = list(plan.failures)
    busy: list[str] = []
    if not dry_run:
        for done, region_plan_ in enumerate(plan.regions, start=1):
            if progress is not None and done > 1:
                progress(done - 1, len(plan.regions), plan.regions[done - 2].region)
            try:
                result = merge_region(
                    table,
                    region_plan_,
                    plan.primary_key,
                    engine,
                    max_generations=max_generations,
                    retry=retry,
                    lease_wait=lease_wait,
                )
            except LeaseBusyError as exc:
                busy.append(region_plan_.region)
                log.info("region %s: skipped, %s", region_plan_.region, exc)
                continue
            except MemwalError as exc:
                failures.append(RegionFailure(region_plan_.region, str(exc), exc.exit_code))
                log.error("region %s: %s", region_plan_.region, exc)
                continue
            except OSError as exc:
                first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                failures.append(RegionFailure(region_plan_.region, f"commit failed: {first}"))
                log.error("region %s: commit failed: %s", region_plan_.region, first)
                continue
            if result is not None:
                results.append(result)
                log.info(
                    "region %s: merged generations %s (%d upserted, %d deleted) -> table v%d",
                    result.region,
                    result.merged_generations,
                    result.rows_upserted,
                    result.rows_deleted,
                    result.table_version,
                )
    if progress is not None and plan.regions and not dry_run:
        progress(len(plan.regions), len(plan.regions), plan.regions[-1].region)
    return MergeResult(
        table=table.uri,
        engine=engine.name,
        planned_at_version=plan.table_version,
        regions=results,
        failures=failures,
        busy=busy,
        seconds_plan=planned - started,
        seconds_total=time.perf_counter() - started,
        dry_run=dry_run,
        plan=plan,
    )
