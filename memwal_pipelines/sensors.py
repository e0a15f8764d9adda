"""Sensors of one table.

`{table}_flushed_generations` reads every region's backlog (three storage
requests per region, plus one LIST per region with a backlog), adds new
regions as partitions, records an observation of each region whose latest
flushed generation changed, and requests a merge run for each region with
pending generations. Its cursor (JSON) remembers the last generation observed
per region; run keys are `table:region:merged:latest-pending`, so the same
backlog never starts a second run, while a new flush or a partial merge does.

`{table}_index_catchup` requests a catch-up run when a maintained index lags
behind merged data, once per table version.

`{table}_compaction` requests a compaction run when the base table has
`compaction_fragment_threshold` fragments or more and Lance's planner finds
work, once per table version and never while one is queued or running.
"""

import json

from dagster import (
    AssetObservation,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from memwal_core.services.backlog import backlog
from memwal_core.services.catchup import index_lag, maintained_indexes
from memwal_core.services.compact import plan_compaction
from memwal_pipelines.assets import TableKeys
from memwal_pipelines.jobs import TableJobs
from memwal_pipelines.resources import table_resource


def flushed_generations_sensor(keys: TableKeys, jobs: TableJobs) -> SensorDefinition:
    table = keys.table

    @sensor(
        name=f"{table.name}_flushed_generations",
        job=jobs.merge,
        minimum_interval_seconds=table.sensor_interval_seconds,
        description="New regions become partitions; new flushed generations start ordered merges.",
    )
    def flushed_generations(context: SensorEvaluationContext) -> SensorResult:
        observed: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
        with table_resource(table).open() as opened:
            found = backlog(opened)
        known = set(context.instance.get_dynamic_partitions(keys.regions_name))
        new_regions = [r.region for r in found.regions if r.region not in known]
        observations = [
            AssetObservation(
                asset_key=keys.flushed,
                partition=r.region,
                metadata={
                    "latest_flushed_generation": r.latest_flushed,
                    "merged_generation": r.merged_generation,
                    "pending_generations": len(r.pending),
                    "pending_bytes": r.pending_bytes,
                    "oldest_pending_age_seconds": round(r.oldest_pending_age(found.read_at), 1),
                },
            )
            for r in found.regions
            if observed.get(r.region) != r.latest_flushed
        ]
        runs = [
            RunRequest(
                run_key=f"{table.name}:{r.region}:{r.merged_generation}:{r.pending[-1]}",
                partition_key=r.region,
            )
            for r in found.regions
            if r.pending
        ]
        return SensorResult(
            run_requests=runs,
            dynamic_partitions_requests=[keys.regions.build_add_request(new_regions)] if new_regions else [],
            asset_events=observations,
            cursor=json.dumps({**observed, **{r.region: r.latest_flushed for r in found.regions}}),
        )

    return flushed_generations


def index_catchup_sensor(keys: TableKeys, jobs: TableJobs) -> SensorDefinition:
    table = keys.table

    @sensor(
        name=f"{table.name}_index_catchup",
        job=jobs.catchup,
        minimum_interval_seconds=max(30, table.sensor_interval_seconds),
        description="A maintained index behind merged data starts a catch-up run.",
    )
    def index_catchup(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        with table_resource(table).open() as opened:
            details = opened.index_details()
            names, _missing = maintained_indexes(opened, details)
        lagging = [n for n in names if max(index_lag(details, n).values(), default=0) > 0]
        if not lagging:
            return SkipReason("every maintained index is caught up")
        return RunRequest(run_key=f"{table.name}:catchup:{details.table_version}")

    return index_catchup


UNFINISHED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def compaction_sensor(keys: TableKeys, jobs: TableJobs) -> SensorDefinition:
    table = keys.table
    threshold = table.compaction_fragment_threshold

    @sensor(
        name=f"{table.name}_compaction",
        job=jobs.compaction,
        minimum_interval_seconds=max(60, table.sensor_interval_seconds),
        description=f"{threshold} base-table fragments or more start a compaction run.",
    )
    def compaction(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        # Merges commit new versions while a compaction runs: one compaction at a time is enough.
        if context.instance.get_runs_count(RunsFilter(job_name=jobs.compaction.name, statuses=UNFINISHED)):
            return SkipReason("a compaction run is queued or running")
        with table_resource(table).open() as opened:
            fragments = len(opened.dataset().get_fragments())
            if fragments < threshold:
                return SkipReason(f"{fragments} fragments, under the threshold of {threshold}")
            plan = plan_compaction(opened, target_rows_per_fragment=table.compaction_target_rows, max_tasks=1)
        if not plan.tasks:
            return SkipReason(f"{fragments} fragments, none that Lance would rewrite")
        return RunRequest(run_key=f"{table.name}:compaction:{plan.read_version}")

    return compaction
