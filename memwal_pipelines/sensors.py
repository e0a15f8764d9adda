"""Sensors of one table.

`{table}_flushed_generations` reads every region's backlog, adds new
regions as partitions, records an observation of each region whose latest
flushed or merged generation changed (merge runs also record one for each
region they merged), records the `{table}/status` asset from the same read
(plus the manifests of the regions the tick did not re-read) when any region changed since the status it last recorded (at most every
`status_interval_seconds`, default 60: the status carries a regions table,
stored with every event), and requests ONE merge run for the table: a round
over every region partition, which merges all regions with work in a few
commits. Its cursor (JSON) remembers the last flushed and merged generations observed per region,
each region's backlog with the manifest version it was read from (so a tick re-reads only
the regions whose manifest has a newer version or whose merge progress moved: one HEAD for
every other region), and a digest of the regions' state as of the last status recorded, with its time;
the run key is a digest of every (region, merged, latest pending) triple, so
the same backlog never starts a second run, while a new flush or a partial
merge does. No run is requested while one of the table's merge runs is still
queued: that run merges whatever is pending when it starts. It also stamps the
base table with its completion time for the FreshnessPolicy (freshness.py).

`{table}_index_catchup` requests a catch-up run when a maintained index lags
behind merged data, or an index was created or dropped since the MemWAL
details last listed the maintained ones, once per table version.

`{table}_compaction` requests a compaction run when the base table has
`compaction_fragment_threshold` fragments or more and Lance's planner finds
work, once per table version and never while one is queued or running.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dagster import (
    AssetMaterialization,
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

from memwal_core.services.backlog import RegionBacklog, backlog_since
from memwal_core.services.catchup import index_state
from memwal_core.services.compact import plan_compaction
from memwal_core.services.status import status_since
from memwal_pipelines.assets import region_observation, status_materialization
from memwal_pipelines.freshness import freshness_due, record_complete_as_of
from memwal_pipelines.jobs import TableJobs
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import MemWalResource
from memwal_pipelines.status_view import StatusView

# Dagster's tags for a run over a range of partitions (a single-run backfill sets the same).
PARTITION_RANGE_START = "dagster/asset_partition_range_start"
PARTITION_RANGE_END = "dagster/asset_partition_range_end"


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FlushedCursor:
    """What the flushed-generations sensor remembers between ticks.

    `regions`: per region, "latest flushed:merged" as last observed. `status_digest`
    and `status_at`: the regions' state the last recorded status showed, and when.
    `seen`: per region, the manifest version and backlog the last tick read.
    """

    regions: Mapping[str, str]
    status_digest: str = ""
    status_at: float = 0.0
    seen: Mapping[str, tuple[int, RegionBacklog]] = field(default_factory=dict)
    # The completion time last recorded for the base table's freshness (freshness.py).
    complete_as_of: float = 0.0

    @classmethod
    def load(cls, text: str | None) -> FlushedCursor:
        data = json.loads(text) if text else {}
        if "regions" not in data:  # a cursor written before the sensor recorded the status
            return cls(regions=data)
        seen = {r: (int(v[0]), RegionBacklog.from_list(r, v[1:])) for r, v in data.get("seen", {}).items()}
        status = data["status"]
        return cls(data["regions"], status["digest"], status["at"], seen, data.get("complete_as_of", 0.0))

    def dump(self) -> str:
        status = {"digest": self.status_digest, "at": self.status_at}
        seen = {r: [version, *backlog.to_list()] for r, (version, backlog) in self.seen.items()}
        return json.dumps(
            {
                "regions": dict(self.regions),
                "status": status,
                "seen": seen,
                "complete_as_of": self.complete_as_of,
            }
        )

    def merged_moved(self, regions: Sequence[RegionBacklog]) -> bool:
        """Whether a merge ran since the last tick (a region's merged generation changed)."""
        return any(
            r.region in self.seen and self.seen[r.region][1].merged_generation != r.merged_generation
            for r in regions
        )

    @staticmethod
    def state_digest(state: Mapping[str, str]) -> str:
        return _digest([f"{region}:{s}" for region, s in sorted(state.items())])

    def status_due(self, state: Mapping[str, str], now: float, interval: float) -> bool:
        """Whether the recorded status is out of date and the last one is `interval` seconds old."""
        return self.state_digest(state) != self.status_digest and now - self.status_at >= interval


def merge_round_request(
    table: str, partitions: Sequence[str], regions: Sequence[RegionBacklog]
) -> list[RunRequest]:
    """One run covering every region partition, if any region has pending generations."""
    pending = sorted(f"{r.region}:{r.merged_generation}:{r.pending[-1]}" for r in regions if r.pending)
    if not pending or not partitions:
        return []
    return [
        RunRequest(
            run_key=f"{table}:merge:{_digest(pending)}",
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
    def flushed_generations(context: SensorEvaluationContext, memwal: MemWalResource) -> SensorResult:
        cursor = FlushedCursor.load(context.cursor)
        started = time.perf_counter()
        with memwal.open(table) as opened:
            read = backlog_since(opened, cursor.seen)
            found = read.backlog
            # Per region, "latest flushed:merged": a region is observed again whenever either changes.
            state = {r.region: f"{r.latest_flushed}:{r.merged_generation}" for r in found.regions}
            due = cursor.status_due(state, found.read_at, table.status_interval_seconds)
            view = StatusView(status_since(opened, read, started), found) if due else None
        known = set(context.instance.get_dynamic_partitions(keys.regions_name))
        new_regions = [r.region for r in found.regions if r.region not in known]
        events: list[AssetObservation | AssetMaterialization] = [
            region_observation(keys, r, found.read_at)
            for r in found.regions
            if cursor.regions.get(r.region) != state[r.region]
        ]
        recorded = cursor.status_digest, cursor.status_at
        if view is not None:
            events.append(status_materialization(keys, view))
            recorded = cursor.state_digest(state), found.read_at
        complete_as_of = cursor.complete_as_of
        if freshness_due(table, complete_as_of, found.complete_as_of, cursor.merged_moved(found.regions)):
            complete_as_of = found.complete_as_of
            record_complete_as_of(context.instance, keys, complete_as_of, found.pending_total)
        queued = context.instance.get_runs_count(RunsFilter(job_name=jobs.merge.name, statuses=QUEUED))
        partitions = [*context.instance.get_dynamic_partitions(keys.regions_name), *new_regions]
        runs = [] if queued else merge_round_request(table.name, partitions, found.regions)
        return SensorResult(
            run_requests=runs,
            dynamic_partitions_requests=[keys.regions.build_add_request(new_regions)] if new_regions else [],
            asset_events=events,
            cursor=FlushedCursor(
                {**cursor.regions, **state},
                *recorded,
                seen={r.region: (read.manifest_versions[r.region], r) for r in found.regions},
                complete_as_of=complete_as_of,
            ).dump(),
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
    def index_catchup(memwal: MemWalResource) -> RunRequest | SkipReason:
        with memwal.open(table) as opened:
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
    def compaction(context: SensorEvaluationContext, memwal: MemWalResource) -> RunRequest | SkipReason:
        # Merges commit new versions while a compaction runs: one compaction at a time is enough.
        if context.instance.get_runs_count(RunsFilter(job_name=jobs.compaction.name, statuses=UNFINISHED)):
            return SkipReason("a compaction run is queued or running")
        with memwal.open(table) as opened:
            fragments = len(opened.dataset().get_fragments())
            if fragments < threshold:
                return SkipReason(f"{fragments} fragments, under the threshold of {threshold}")
            plan = plan_compaction(opened, target_rows_per_fragment=table.compaction_target_rows, max_tasks=1)
        if not plan.tasks:
            return SkipReason(f"{fragments} fragments, none that Lance would rewrite")
        return RunRequest(run_key=f"{table.name}:compaction:{plan.read_version}")

    return compaction
