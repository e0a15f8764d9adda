"""Asset checks of one table: merge backlog and age, index lag, GC backlog, LSM consistency.

They read the table (changing nothing) and run in the table's checks job, on
a schedule, not inside every per-region merge run: the consistency check
reads every key of the base table. `lsm_consistency` is blocking, and the GC
job runs it before GC: a failure there skips GC (nothing is deleted while the
LSM view and the stored generations disagree).
"""

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetChecksDefinition, asset_check

from memwal_core.services.backlog import backlog
from memwal_core.services.catchup import index_state
from memwal_core.services.consistency import check_consistency
from memwal_core.services.gc.service import gc
from memwal_pipelines.assets import gc_figures, service_metadata
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import MemWalResource


def table_checks(keys: TableKeys) -> list[AssetChecksDefinition]:
    """Every asset check of one table."""
    table = keys.table

    def requester(context: AssetCheckExecutionContext) -> str:
        """The service a check's requests are named after: GC's, when GC's job runs it before and after
        GC (the blocking consistency check, the backlog check), else the checks job's."""
        return "gc" if context.run.job_name == f"{table.name}_gc" else "checks"

    @asset_check(
        asset=keys.base,
        name="merge_backlog",
        description=(
            f"At most {table.max_backlog_generations} pending generations per region, "
            f"the oldest flushed at most {table.max_pending_age_seconds:.0f} s ago."
        ),
    )
    def merge_backlog(memwal: MemWalResource) -> AssetCheckResult:
        with memwal.open(table, "checks") as opened:
            found = backlog(opened)
        worst = max(found.regions, key=lambda r: len(r.pending), default=None)
        return AssetCheckResult(
            passed=found.max_pending <= table.max_backlog_generations
            and found.max_age_seconds <= table.max_pending_age_seconds,
            metadata={
                "pending_generations": found.pending_total,
                "max_pending_per_region": found.max_pending,
                "oldest_pending_age_seconds": round(found.max_age_seconds, 1),
                "worst_region": worst.region if worst else "",
            },
        )

    @asset_check(
        asset=keys.indexes,
        name="index_lag",
        description=f"Every maintained index at most {table.max_index_lag} generations behind merges.",
    )
    def index_lag_check(memwal: MemWalResource) -> AssetCheckResult:
        with memwal.open(table, "checks") as opened:
            lags = index_state(opened).max_lag
        return AssetCheckResult(
            passed=max(lags.values(), default=0) <= table.max_index_lag,
            metadata={"max_lag": max(lags.values(), default=0), **{f"lag_{n}": v for n, v in lags.items()}},
        )

    @asset_check(
        asset=keys.base,
        name=keys.consistency_check.name,
        blocking=True,
        description="Lance's LSM read agrees with the base table plus the pending generations.",
    )
    def lsm_consistency(context: AssetCheckExecutionContext, memwal: MemWalResource) -> AssetCheckResult:
        with memwal.open(table, requester(context)) as opened:
            result = check_consistency(opened)
        for line in [*(f.message for f in result.failures), *result.mismatches[:5]]:
            context.log.error(line)
        unreadable = [{"unreadable_region": f.region or "", "error": f.error} for f in result.failures[:1]]
        return AssetCheckResult(
            passed=result.passed,
            description=result.explanation,
            metadata=service_metadata(result, **(unreadable[0] if unreadable else {})),
        )

    @asset_check(
        asset=keys.gc_report,
        name="gc_backlog",
        description=(
            f"At most {table.max_gc_backlog_generations} merged generations that GC could delete or "
            "prune now but has not (a GC dry run; generations kept by a rule are reported, not counted)."
        ),
    )
    def gc_backlog(context: AssetCheckExecutionContext, memwal: MemWalResource) -> AssetCheckResult:
        with memwal.open(table, requester(context)) as opened:
            planned = gc(opened, dry_run=True, policy=table.gc_policy())
        figures = gc_figures(planned)
        # A generation pruned and deleted in one run (grace 0) counts once.
        waiting = sum(len({d.path for d in (*r.prune, *r.delete_dirs)}) for r in planned.plan.regions)
        return AssetCheckResult(
            passed=waiting <= table.max_gc_backlog_generations and not planned.failures,
            metadata={
                "gc_backlog_generations": waiting,
                **{k: v for k, v in figures.items() if k.startswith("kept_")},
                "storage_requests": sum(planned.requests.values()),
                "failed_regions": len(planned.failures),
            },
        )

    return [merge_backlog, index_lag_check, lsm_consistency, gc_backlog]
