"""The code location's three sensors, each over every table (tables with `sensors: false` left out).

One sensor per location, not per table: a Dagster sensor tick costs tens of
milliseconds of the daemon's and code server's CPU whatever it reads, so 50
tables' own sensors every 5 s kept a core busy at idle (bench/many_tables.py).
A tick reads every table (every `sensor_interval_seconds`, the shortest of the
tables'), keeping each open between ticks; one table that cannot be read is
logged and skipped, not the others.

`memwal_flushed_generations` reads every region's backlog (probing what is due), adds new
regions as partitions, records an observation of each region whose latest
flushed or merged generation changed (merge runs also record one for each
region they merged), records the `{table}/status` asset from the same read
(plus the manifests of the regions the tick did not re-read) when any region changed since the status it last recorded (at most every
`status_interval_seconds`, default 60: the status carries a regions table,
stored with every event), stamps the base table with its completion time for
the FreshnessPolicy (freshness.py), and requests ONE merge round for the table:
a run of `{table}_merge` over every region partition, which merges all regions
with work in a few commits, starting to read each from the manifest version this tick read
(`MergeRoundConfig`; as it is, when the round plans within 30 s of the tick).
When rounds are due for BATCH_FROM tables or more at once, they go in shared runs of
`memwal_merge_tables` (as many as run at once, SHARED_RUNS): each run is a process that takes seconds of CPU to start, and one per table
starved every table when all of them flushed at once.
Its cursor (JSON, per table) remembers the last flushed and merged generations observed per region,
each region's backlog with the manifest version it was read from (so a tick re-reads only
the regions whose manifest has a newer version or whose merge progress moved: one HEAD for
every other region that is due), when each region, the table's version and its region
listing last changed and were last probed (a quiet one is probed less often the longer it
stays quiet, at least every quarter of `max_pending_age_seconds`: backoff.py, so an idle
region costs about half a request a minute and a new flush is seen within that bound),
the table version, and a digest of the regions' state as of the last status recorded, with its time;
the run key is a digest of every (region, merged, latest pending) triple, so
the same backlog never starts a second run, while a new flush or a partial
merge does; a backlog still pending `max_pending_age_seconds` after its oldest
flush takes a new key each such period (its round failed, Dagster's retries
too, and without a new flush nothing would ask again). No round is requested for a table while one of its merge runs is still
queued: that run merges whatever is pending when it starts; and none for any table while a
merge run waits for a run slot (`merge_queue`): the run asked for after it covers them all.

`memwal_index_catchup` requests a table's catch-up run when a maintained index lags
behind merged data, or an index was created or dropped since the MemWAL
details last listed the maintained ones, once per table version (a table whose
version did not move since its last tick is not read further). It and the
compaction sensor probe the table's version (one HEAD) with the flushed sensor's
backoff: every tick while it moves, at its bound once the table is quiet.

`memwal_compaction` requests a table's compaction run when the base table has
`compaction_fragment_threshold` fragments or more and Lance's planner finds
work, once per table version and never while one is queued or running.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetMaterialization,
    AssetObservation,
    DagsterRun,
    DagsterRunStatus,
    JobDefinition,
    RunRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from memwal_core.errors import MemwalError, first_line
from memwal_core.services.backlog import RegionBacklog, Watched, backlog_since
from memwal_core.services.backoff import Backoff, Clock, probed
from memwal_core.services.catchup import index_state
from memwal_core.services.compact import plan_compaction
from memwal_core.services.status import status_since
from memwal_pipelines.assets import merge_round_config, region_observation, status_materialization
from memwal_pipelines.freshness import freshness_due, probe_backoff, record_complete_as_of
from memwal_pipelines.jobs import TableJobs
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.merge_tables import MERGE_TABLES_JOB, TABLES_TAG, merge_tables_config
from memwal_pipelines.resources import sensor_table
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
    `watched`: the table version, each region's manifest version and backlog the ticks read,
    and when each region (and each table-level probe) last changed and was last probed.
    """

    regions: Mapping[str, str]
    status_digest: str = ""
    status_at: float = 0.0
    watched: Watched = field(default_factory=Watched)
    # The completion time last recorded for the base table's freshness (freshness.py).
    complete_as_of: float = 0.0

    @classmethod
    def load(cls, text: str | None) -> FlushedCursor:
        """The cursor `dump` wrote, or an older one: a region without a clock is probed at once, then
        counts as just changed."""
        data = json.loads(text) if text else {}
        if "regions" not in data:  # a cursor written before the sensor recorded the status
            return cls(regions=data)
        seen = {r: (int(v[0]), RegionBacklog.from_list(r, v[1:])) for r, v in data.get("seen", {}).items()}
        clocks = {k: Clock.from_list(v) for k, v in data.get("clocks", {}).items()}
        watched = Watched(data.get("version"), seen, clocks)
        status = data["status"]
        return cls(data["regions"], status["digest"], status["at"], watched, data.get("complete_as_of", 0.0))

    def dump(self) -> str:
        status = {"digest": self.status_digest, "at": self.status_at}
        watched = self.watched
        seen = {r: [version, *backlog.to_list()] for r, (version, backlog) in watched.seen.items()}
        return json.dumps(
            {
                "regions": dict(self.regions),
                "status": status,
                "version": watched.version,
                "seen": seen,
                "clocks": {k: c.to_list() for k, c in watched.clocks.items()},
                "complete_as_of": self.complete_as_of,
            }
        )

    def merged_moved(self, regions: Sequence[RegionBacklog]) -> bool:
        """Whether a merge ran since the last tick (a region's merged generation changed)."""
        seen = self.watched.seen
        return any(
            r.region in seen and seen[r.region][1].merged_generation != r.merged_generation for r in regions
        )

    @staticmethod
    def state_digest(state: Mapping[str, str]) -> str:
        return _digest([f"{region}:{s}" for region, s in sorted(state.items())])

    def status_due(self, state: Mapping[str, str], now: float, interval: float) -> bool:
        """Whether the recorded status is out of date and the last one is `interval` seconds old."""
        return self.state_digest(state) != self.status_digest and now - self.status_at >= interval


def merge_round_request(
    table: str,
    partitions: Sequence[str],
    regions: Sequence[RegionBacklog],
    *,
    now: float,
    again_after: float,
    run_config: Mapping[str, Any] | None = None,
) -> list[RunRequest]:
    """One run covering every region partition, if any region has pending generations (with `run_config`).

    Its run key names the backlog (each region's merged and latest pending generation): Dagster
    starts no second run for a key it has seen, so the same backlog never starts two rounds, while a
    new flush or a partial merge does. A backlog still pending `again_after` seconds after its
    oldest generation was flushed (the table's lag threshold) takes a new key each such period: its
    round failed and so did Dagster's retries (a code server restarting, storage down), or merged
    none of it, and without a new flush nothing else would ask again.
    """
    pending = sorted(f"{r.region}:{r.merged_generation}:{r.pending[-1]}" for r in regions if r.pending)
    if not pending or not partitions:
        return []
    flushed = [r.oldest_pending_created_at for r in regions if r.pending and r.oldest_pending_created_at]
    asked = int(max(0.0, now - min(flushed)) // again_after) if flushed else 0
    return [
        RunRequest(
            run_key=f"{table}:merge:{_digest(pending)}" + (f":{asked}" if asked else ""),
            tags={PARTITION_RANGE_START: partitions[0], PARTITION_RANGE_END: partitions[-1]},
            run_config=run_config or {},
        )
    ]


FLUSHED_SENSOR = "memwal_flushed_generations"
CATCHUP_SENSOR = "memwal_index_catchup"
COMPACTION_SENSOR = "memwal_compaction"
# From this many tables with a round due in one tick, rounds share SHARED_RUNS runs (dagster.yaml's
# max_concurrent_runs: they start at once) of at least BATCH_FROM and at most TABLES_PER_RUN tables.
BATCH_FROM = 3
SHARED_RUNS = 4
TABLES_PER_RUN = 16
QUEUED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED]
UNFINISHED = [*QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
# How long a merge run waiting for a run slot holds new rounds back (`merge_queue`): a queue stuck
# for longer (the daemon down, a slot held by a dead run) does not stop other tables' rounds.
HOLD_SECONDS = 60.0


def table_cursors(text: str | None) -> dict[str, str]:
    """The location sensor's cursor: each table's own (its JSON text), by table name."""
    loaded: dict[str, str] = json.loads(text) if text else {}
    return loaded


def each_table(
    context: SensorEvaluationContext,
    tables: Sequence[TableKeys],
    read: Callable[[TableKeys, str | None], str],
) -> str:
    """`read` each table the sensors watch (with its cursor; it returns the new one); the location's cursor.

    A table whose read fails is logged in one line and keeps its cursor; the others go on.
    """
    cursors = table_cursors(context.cursor)
    for keys in tables:
        name = keys.table.name
        if not keys.table.sensors:
            continue
        try:
            cursors[name] = read(keys, cursors.get(name))
        except MemwalError as exc:
            context.log.warning(f"table {name}: {first_line(exc)}")
    return json.dumps(cursors)


def merged_tables(run: DagsterRun) -> list[str]:
    """The tables a merge run covers: its own table, or those a shared one names (none for other jobs)."""
    if run.job_name == MERGE_TABLES_JOB:
        return run.tags.get(TABLES_TAG, "").split(",")
    if run.job_name.endswith("_merge"):
        return [run.job_name.removesuffix("_merge")]
    return []


@dataclass(frozen=True)
class MergeQueue:
    """The merge runs not started yet: the tables with a round queued, and whether one of those runs
    waits for a run slot (`held`: the tick's new rounds are held back, see `merge_queue`)."""

    queued: set[str]
    held: bool


def merge_queue(records: Sequence[RunRecord], now: float) -> MergeQueue:
    """What the unfinished runs (`records`) say of the merge queue at `now`.

    A merge run waiting for one of the instance's run slots, for less than HOLD_SECONDS, holds the
    tick's new rounds back: they would wait behind it anyway, and held, the run asked for once it has
    started covers every table that flushed meanwhile (when all tables burst, one process for many
    instead of one each, each taking seconds of CPU to start). A table's own merge run waiting for its
    table's round in flight (its pool's one slot) holds nothing back.
    """
    started = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
    running = {t for r in records if r.dagster_run.status in started for t in merged_tables(r.dagster_run)}
    queued: set[str] = set()
    held = False
    for record in records:
        run = record.dagster_run
        tables = merged_tables(run)
        if run.status not in QUEUED or not tables:
            continue
        queued.update(tables)
        behind_own_round = run.job_name != MERGE_TABLES_JOB and running.intersection(tables)
        if not behind_own_round and now - record.create_timestamp.timestamp() < HOLD_SECONDS:
            held = True
    return MergeQueue(queued, held)


@dataclass
class FlushedTick:
    """What one tick found for one table."""

    events: list[AssetObservation | AssetMaterialization]
    new_regions: list[str]
    round: RunRequest | None
    cursor: FlushedCursor
    # The manifest version this tick knows of each region with pending generations: where the round reads it.
    manifest_versions: dict[str, int] = field(default_factory=dict)
    # When the oldest of them was last probed and found the newest (0.0: never).
    polled_at: float = 0.0


def flushed_tick(
    context: SensorEvaluationContext,
    keys: TableKeys,
    text: str | None,
    queued: bool,
    now: float | None = None,
) -> FlushedTick:
    """One table's read at `now` (default: the clock's): its observations, status, freshness stamp,
    new regions and merge round."""
    table = keys.table
    cursor = FlushedCursor.load(text)
    started = time.perf_counter()
    with sensor_table(table) as opened:
        read = backlog_since(opened, cursor.watched, probe_backoff(table), now=now)
        found = read.backlog
        # Per region, "latest flushed:merged": a region is observed again whenever either changes.
        state = {r.region: f"{r.latest_flushed}:{r.merged_generation}" for r in found.regions}
        due = cursor.status_due(state, found.read_at, table.status_interval_seconds)
        view = StatusView(status_since(opened, read, started), found) if due else None
    # The partitions are read only when this tick may add one or ask for a round: an idle tick
    # (every region seen before, nothing pending) costs no query of Dagster's storage.
    unseen = any(r.region not in cursor.regions for r in found.regions)
    if unseen or (not queued and any(r.pending for r in found.regions)):
        known = context.instance.get_dynamic_partitions(keys.regions_name)
        partitions = set(known)
        new_regions = [r.region for r in found.regions if r.region not in partitions]
    else:
        known, new_regions = [], []
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
    versions = {r: version for r, (version, backlog) in read.watched.seen.items() if backlog.pending}
    clocks = read.watched.clocks
    polled_at = min((c.probed_at if (c := clocks.get(r)) else 0.0 for r in versions), default=0.0)
    rounds = (
        []
        if queued
        else merge_round_request(
            table.name,
            [*known, *new_regions],
            found.regions,
            now=found.read_at,
            again_after=table.max_pending_age_seconds,
            run_config=merge_round_config(keys, versions, polled_at),
        )
    )
    return FlushedTick(
        events,
        new_regions,
        rounds[0] if rounds else None,
        FlushedCursor(
            {**cursor.regions, **state},
            *recorded,
            watched=read.watched,
            complete_as_of=complete_as_of,
        ),
        versions,
        polled_at,
    )


def shared_rounds(
    rounds: Mapping[str, RunRequest],
    jobs: Mapping[str, TableJobs],
    versions: Mapping[str, Mapping[str, int]],
    polled_at: Mapping[str, float],
) -> list[RunRequest]:
    """The rounds as runs: each table's own, or, from BATCH_FROM tables at once, shared ones, given the
    manifest versions each table's tick read (`versions`, by table) and when it saw them current."""
    if len(rounds) < BATCH_FROM:
        return [
            RunRequest(
                job_name=jobs[name].merge.name, run_key=r.run_key, tags=r.tags, run_config=r.run_config
            )
            for name, r in rounds.items()
        ]
    names = sorted(rounds)
    per_run = min(TABLES_PER_RUN, max(BATCH_FROM, -(-len(names) // SHARED_RUNS)))
    runs = []
    for start in range(0, len(names), per_run):
        batch = names[start : start + per_run]
        runs.append(
            RunRequest(
                job_name=MERGE_TABLES_JOB,
                run_key=f"memwal:merge:{_digest([rounds[n].run_key or n for n in batch])}",
                tags={TABLES_TAG: ",".join(batch)},
                run_config=merge_tables_config(batch, versions, polled_at),
            )
        )
    return runs


def location_sensors(
    tables: Sequence[TableKeys], jobs: Mapping[str, TableJobs], merge_tables: JobDefinition
) -> list[SensorDefinition]:
    """The location's flushed-generations, catch-up and compaction sensors over `tables`."""
    intervals = [k.table.sensor_interval_seconds for k in tables]

    @sensor(
        name=FLUSHED_SENSOR,
        jobs=[*(j.merge for j in jobs.values()), merge_tables],
        minimum_interval_seconds=min(intervals),
        description="New regions become partitions; new flushed generations start one merge round per table.",
    )
    def flushed_generations(context: SensorEvaluationContext) -> SensorResult:
        queue = merge_queue(context.instance.get_run_records(RunsFilter(statuses=UNFINISHED)), time.time())
        events: list[AssetObservation | AssetMaterialization] = []
        partitions = []
        rounds: dict[str, RunRequest] = {}
        versions: dict[str, dict[str, int]] = {}
        polled_at: dict[str, float] = {}

        def read(keys: TableKeys, text: str | None) -> str:
            found = flushed_tick(context, keys, text, keys.table.name in queue.queued)
            events.extend(found.events)
            if found.new_regions:
                partitions.append(keys.regions.build_add_request(found.new_regions))
            if found.round is not None:
                rounds[keys.table.name] = found.round
                versions[keys.table.name] = found.manifest_versions
                polled_at[keys.table.name] = found.polled_at
            return found.cursor.dump()

        cursor = each_table(context, tables, read)
        return SensorResult(
            run_requests=[] if queue.held else shared_rounds(rounds, jobs, versions, polled_at),
            dynamic_partitions_requests=partitions,
            asset_events=events,
            cursor=cursor,
        )

    catchup_interval = max(30, min(intervals))
    compaction_interval = max(60, min(intervals))

    @sensor(
        name=CATCHUP_SENSOR,
        jobs=[j.catchup for j in jobs.values()],
        minimum_interval_seconds=catchup_interval,
        description="A maintained index behind merged data, or not yet listed, starts the table's catch-up run.",
    )
    def index_catchup(context: SensorEvaluationContext) -> SensorResult:
        runs = []

        def read(keys: TableKeys, seen: str | None) -> str:
            moved, cursor = version_moved(keys, seen, catchup_interval)
            if moved:
                with sensor_table(keys.table) as opened:
                    state = index_state(opened)
                if state.needs_catchup:
                    name = keys.table.name
                    runs.append(
                        RunRequest(
                            job_name=jobs[name].catchup.name, run_key=f"{name}:catchup:{state.table_version}"
                        )
                    )
            return cursor.dump()

        return SensorResult(run_requests=runs, cursor=each_table(context, tables, read))

    @sensor(
        name=COMPACTION_SENSOR,
        jobs=[j.compaction for j in jobs.values()],
        minimum_interval_seconds=compaction_interval,
        description="A table with compaction_fragment_threshold base-table fragments or more starts its compaction.",
    )
    def compaction(context: SensorEvaluationContext) -> SensorResult:
        # Merges commit new versions while a compaction runs: one compaction at a time is enough.
        busy = {r.job_name for r in context.instance.get_runs(RunsFilter(statuses=UNFINISHED))}
        runs = []

        def read(keys: TableKeys, seen: str | None) -> str:
            job = jobs[keys.table.name].compaction.name
            if job in busy:
                return seen or ""
            moved, cursor = version_moved(keys, seen, compaction_interval)
            if moved:
                with sensor_table(keys.table) as opened:
                    request = compaction_request(keys, opened.dataset(cursor.version))
                if request is not None:
                    runs.append(RunRequest(job_name=job, run_key=request))
            return cursor.dump()

        return SensorResult(run_requests=runs, cursor=each_table(context, tables, read))

    return [flushed_generations, index_catchup, compaction]


@dataclass(frozen=True)
class VersionCursor:
    """What the catch-up and compaction sensors keep per table: the table version they last read, and
    the clock of their probes of it (the cursor before the clock was a bare version number)."""

    version: int | None = None
    clock: Clock | None = None

    @classmethod
    def load(cls, text: str | None) -> VersionCursor:
        if not text:
            return cls()
        if text.isdigit():
            return cls(int(text))
        data = json.loads(text)
        return cls(data["version"], Clock.from_list(data["clock"]))

    def dump(self) -> str:
        return json.dumps({"version": self.version, "clock": self.clock.to_list() if self.clock else None})


def version_moved(
    keys: TableKeys, text: str | None, interval: float, now: float | None = None
) -> tuple[bool, VersionCursor]:
    """Whether the table's version moved since the cursor's (probed with one HEAD of its next manifest,
    `MemWalTable.version_after`, when the flushed-generations sensor's backoff says a probe is due: every
    tick while merges move it, at least every quarter of `max_pending_age_seconds` once it is quiet), and
    the new cursor."""
    cursor = VersionCursor.load(text)
    now = time.time() if now is None else now
    backoff = Backoff(tick=interval, bound=max(interval, probe_backoff(keys.table).bound))
    if cursor.version is not None and not backoff.due(cursor.clock, now, keys.table.name):
        return False, cursor
    with sensor_table(keys.table) as opened:
        version = opened.version_after(cursor.version)
    moved = version != cursor.version
    return moved, VersionCursor(version, probed(cursor.clock, now, moved))


def compaction_request(keys: TableKeys, dataset: Any) -> str | None:
    """The run key of a compaction the table calls for (enough fragments, and work Lance would do), if any."""
    table = keys.table
    if len(dataset.get_fragments()) < table.compaction_fragment_threshold:
        return None
    with sensor_table(table) as opened:
        plan = plan_compaction(opened, target_rows_per_fragment=table.compaction_target_rows, max_tasks=1)
    return f"{table.name}:compaction:{plan.read_version}" if plan.tasks else None
