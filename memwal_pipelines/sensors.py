"""Sensors of one table.

`{table}_flushed_generations` reads every region's backlog (three storage
requests per region, plus one LIST per region with a backlog), adds new
regions as partitions, records an observation of each region whose latest
flushed or merged generation changed (merge runs also record one for each
region they merged), and requests ONE merge run for the table: a round
over every region partition, which merges all regions with work in a few
commits. Its cursor (JSON) remembers the last flushed and merged generations observed per region;
the run key is a digest of every (region, merged, latest pending) triple, so
the same backlog never starts a second run, while a new flush or a partial
merge does. No run is requested while one of the table's merge runs is still
queued: that run merges whatever is pending when it starts.

`{table}_index_catchup` requests a catch-up run when a maintained index lags
behind merged data, or an index was created or dropped since the MemWAL
details last listed the maintained ones, once per table version.

`{table}_compaction` requests a compaction run when the base table has
`compaction_fragment_threshold` fragments or more and Lance's planner finds
work, once per table version and never while one is queued or running.
"""

import hashlib
import json
from collections.abc import Sequence

from dagster import (
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from memwal_core.services.backlog import RegionBacklog, backlog
from memwal_core.services.catchup import index_state
from memwal_core.services.compact import plan_compaction
from memwal_pipelines.assets import TableKeys, region_observation
from memwal_pipelines.jobs import TableJobs
from memwal_pipelines.resources import table_resource

# Dagster's tags for a run over a range of partitions (a single-run backfill sets the same).
PARTITION_RANGE_START = "dagster/asset_partition_range_start"
PARTITION_RANGE_END = "dagster/asset_partition_range_end"


def merge_round_request(
    table: str, partitions: Sequence[str], regions: Sequence[RegionBacklog]
) -> list[RunRequest]:
    """One run covering every region partition, if any region has pending generations."""
    pending = sorted(f"{r.region}:{r.merged_generation}:{r.pending[-1]}" for r in regions if r.pending)
    if not pending or not partitions:
        return []
    digest = hashlib.sha256("\n".join(pending).encode()).hexdigest()[:16]
    return [
        RunRequest(
            run_key=f"{table}:merge:{digest}",
            tags={PARTITION_RANGE_START: partitions[0], PARTITION_RANGE_END: partitions[-1]},
        )
    ]


def flushed_generations_sensor(keys: TableKeys, jobs: TableJobs) -> SensorDefinition:
    table = keys.table

    @sensor(
        name=f"{table.name}_flushed_generations",
        job=jobs.merge,
        minimum_interval_seconds=table.sensor_interval_seconds,
        description="New regions become partitions; new flushed generations start one merge round.",
    )
    def flushed_generations(context: SensorEvaluationContext) -> SensorResult:
        # Per region, "latest flushed:merged": a region is observed again whenever either changes.
        observed: dict[str, object] = json.loads(context.cursor) if context.cursor else {}
        with table_resource(table).open() as opened:
            found = backlog(opened)
        state = {r.region: f"{r.latest_flushed}:{r.merged_generation}" for r in found.regions}
        known = set(context.instance.get_dynamic_partitions(keys.regions_name))
        new_regions = [r.region for r in found.regions if r.region not in known]
        observations = [
            region_observation(keys, r, found.read_at)
            for r in found.regions
            if observed.get(r.region) != state[r.region]
        ]
        queued = context.instance.get_runs_count(RunsFilter(job_name=jobs.merge.name, statuses=QUEUED))
        partitions = [*context.instance.get_dynamic_partitions(keys.regions_name), *new_regions]
        runs = [] if queued else merge_round_request(table.name, partitions, found.regions)
        return SensorResult(
            run_requests=runs,
            dynamic_partitions_requests=[keys.regions.build_add_request(new_regions)] if new_regions else [],
            asset_events=observations,
            cursor=json.dumps({**observed, **state}),
        )

    return flushed_generations


def index_catchup_sensor(keys: TableKeys, jobs: TableJobs) -> SensorDefinition:
    table = keys.table

    @sensor(
        name=f"{table.name}_index_catchup",
        job=jobs.catchup,
        minimum_interval_seconds=max(30, table.sensor_interval_seconds),
        description="A maintained index behind merged data, or not yet listed, starts a catch-up run.",
    )
    def index_catchup(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        with table_resource(table).open() as opened:
            state = index_state(opened)
        if not state.needs_catchup:
            return SkipReason("every maintained index is caught up and listed")
        return RunRequest(run_key=f"{table.name}:catchup:{state.table_version}")

    return index_catchup


QUEUED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED]
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
