"""Jobs of one table (their schedules: schedules.py).

Concurrency (dagster.yaml): one merge run per table at a time (the pool
`memwal_merge_{table}`, one slot: a merge run is a round over all of the
table's regions with work, so one at a time is all a table needs), one
catch-up, snapshot, checks or upkeep run per table at a time
(`memwal/service`), and one upkeep run
(compaction, retention, GC) in the instance at a time (`memwal/upkeep`, see
`table_jobs`). Writers of the MemWAL index details
(merge commits, snapshot builds) are serialised by a lease in the table's own
storage, which also covers CLI runs outside Dagster.

Every job runs its step in the run's own process (in-process executor): the
default multiprocess executor would start a second Python process per step,
which measured as most of the flush-to-merge latency (bench/lag.py).

A table's jobs are resolved against the table's own assets, not the location's:
Dagster resolves an asset job by going over every asset of the definitions it
is in, so with every table's jobs in one location the load grew with the square
of the tables (docs/pipeline.md, "Many tables").
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from dagster import (
    AssetSelection,
    Definitions,
    JobDefinition,
    define_asset_job,
    in_process_executor,
)

from memwal_pipelines.keys import TableKeys

if TYPE_CHECKING:  # what define_asset_job returns; dagster does not export the name
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

SERVICE_TAG = "memwal/service"

# Dagster's run monitoring fails a run older than this tag's seconds, even one whose worker is gone.
MAX_RUNTIME_TAG = "dagster/max_runtime"
UPKEEP_TAG = "memwal/upkeep"


@dataclass(frozen=True)
class TableJobs:
    merge: JobDefinition
    catchup: JobDefinition
    snapshot: JobDefinition
    checks: JobDefinition
    compaction: JobDefinition
    retention: JobDefinition
    gc: JobDefinition

    @property
    def all(self) -> list[JobDefinition]:
        return [getattr(self, field.name) for field in fields(self)]


def table_jobs(keys: TableKeys, own: Definitions) -> TableJobs:
    """The jobs of one table, resolved against `own`: the table's assets and checks (`table_definitions`).

    Upkeep (compaction, retention, GC) must not starve merges. Three limits see
    to it: `memwal/upkeep` lets one upkeep run at a time hold a slot of the run
    queue (dagster.yaml), so merges keep the others; `memwal/service`
    `{table}:upkeep` keeps a table's upkeep runs apart (retention must not
    remove the versions a GC run is planning against); and compaction itself
    holds the table's index-details lease, which every merge commit also takes,
    for at most `compaction_max_tasks` rewrite tasks: merges keep collapsing
    and wait only at their commit, for one bounded compaction, and neither
    discards the other's work (an optimistic compaction would lose every race
    with a merge commit under load).
    """
    name = keys.table.name
    # A run whose worker died with the code server (an OOM kill, a lost host) is failed after this,
    # freeing its slot: Dagster's default launcher cannot tell that the worker is gone.
    bound = {MAX_RUNTIME_TAG: str(keys.table.max_runtime_seconds)}
    upkeep = {SERVICE_TAG: f"{name}:upkeep", UPKEEP_TAG: "1", **bound}

    def job(
        suffix: str, selection: AssetSelection, description: str, tags: dict[str, str] | None = None
    ) -> UnresolvedAssetJobDefinition:
        return define_asset_job(
            f"{name}_{suffix}",
            executor_def=in_process_executor,
            selection=selection,
            tags=tags if tags is not None else {SERVICE_TAG: f"{name}:{suffix}", **bound},
            description=description,
        )

    unresolved = dict(
        merge=job(
            "merge",
            AssetSelection.assets(keys.base).without_checks(),
            "One merge round: every covered region's pending generations, many regions per commit.",
            # A run whose worker died (kill -9 of the daemon's tree) is failed after this, freeing its slot.
            tags={MAX_RUNTIME_TAG: str(keys.table.merge_max_runtime())},
        ),
        catchup=job(
            "catchup",
            AssetSelection.assets(keys.indexes).without_checks(),
            "Bring the maintained indexes up to date with merged data.",
        ),
        snapshot=job(
            "snapshot",
            AssetSelection.assets(keys.snapshot, keys.status).without_checks(),
            "Build the MemWAL index region snapshot and record the table's status.",
        ),
        checks=job(
            "checks",
            AssetSelection.checks_for_assets(keys.base, keys.indexes, keys.gc_report),
            "Merge backlog and age, index lag, GC backlog, LSM consistency.",
        ),
        compaction=job(
            "compaction",
            AssetSelection.assets(keys.compaction),
            "Compact the base table's fragments (bounded; merges wait only at their commit).",
            tags=upkeep,
        ),
        retention=job(
            "retention",
            AssetSelection.assets(keys.retention),
            "Remove old untagged base-table versions, so GC can free the generations they pinned.",
            tags=upkeep,
        ),
        gc=job(
            "gc",
            # The blocking check runs first; when it fails, GC does not run.
            AssetSelection.assets(keys.gc_report) | AssetSelection.checks(keys.consistency_check),
            "The LSM-consistency check, then (only if it passed) GC, then the GC backlog check.",
            tags=upkeep,
        ),
    )
    resolver = Definitions.merge(own, Definitions(jobs=list(unresolved.values())))
    return TableJobs(**{field: resolver.resolve_job_def(job.name) for field, job in unresolved.items()})
