"""A schedule per periodic job of a table; the snapshot's, the checks' and GC's start a run only when it has work.

An idle table's scheduled snapshot, checks and GC read every region (three or
four requests each) and start a run worker (seconds of CPU) to find what they
found last time. Their schedules ask Dagster's own storage first, at no storage
request. A run starts when the table changed since the job's last run began (a
region's flushed or merged generation moved: the flushed-generations sensor
and the merge runs record an observation of each region that moved; for the
checks, a catch-up run; for GC, a retention run, which frees the generations
old versions pinned), when that run did not succeed or one of its checks
failed, when the last run left something time alone changes (the checks:
pending generations, whose age grows; GC: generations kept for the grace
period, a catch-up or a flush), or when the last run is REFRESH_SECONDS old
(what no observation shows: a writer's new epoch or WAL position, WAL entries
leaving the fence retention). A table the sensors do not watch (`sensors:
false`, or the flushed-generations sensor stopped) records no observations,
so its schedules start every run. Compaction and retention start every run:
they work on the base table's versions and fragments, not the regions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
)

from memwal_core.services.gc import rules
from memwal_pipelines.jobs import TableJobs
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import FLUSHED_SENSOR

# The longest a gated job goes without a run, whatever the observations say.
REFRESH_SECONDS = 6 * 3600


@dataclass(frozen=True)
class LastRun:
    """The job's last run, as the gate needs it."""

    started: float
    # It succeeded and every check it evaluated passed.
    clean: bool


def run_reason(
    *, watched: bool, last: LastRun | None, changed_at: float | None, waiting: str | None, now: float
) -> str | None:
    """Why a gated job's scheduled tick starts a run, or None when nothing could have changed its answer.

    `changed_at`: when something that changes the job's answer last happened; `waiting`: what the
    last run left that time alone changes (pending generations age; kept generations leave the
    grace period).
    """
    if not watched:
        return "the sensors do not watch this table"
    if last is None:
        return "no run yet"
    if not last.clean:
        return "the last run failed or found a failing check"
    if changed_at is not None and changed_at >= last.started:
        return "the table changed since the last run"
    if waiting is not None:
        return waiting
    if now - last.started >= REFRESH_SECONDS:
        return f"the last run is {REFRESH_SECONDS // 3600} hours old"
    return None


def last_run(instance: DagsterInstance, job_name: str) -> LastRun | None:
    """The job's last finished run: when it started, and whether it and every check it ran passed."""
    records = instance.get_run_records(
        RunsFilter(job_name=job_name, statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]),
        limit=1,
    )
    if not records:
        return None
    record = records[0]
    started = record.start_time or record.create_timestamp.timestamp()
    if record.dagster_run.status != DagsterRunStatus.SUCCESS:
        return LastRun(started, clean=False)
    evaluations = instance.get_records_for_run(
        record.dagster_run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    passed = all(
        e.event_log_entry.dagster_event is not None
        and getattr(e.event_log_entry.dagster_event.event_specific_data, "passed", False)
        for e in evaluations
    )
    return LastRun(started, clean=passed)


def last_change(instance: DagsterInstance, keys: TableKeys, after_jobs: Sequence[str]) -> float | None:
    """When a region's flushed or merged generation last moved (the newest observation of any region),
    or a run of `after_jobs` last started, whichever is later."""
    found = instance.fetch_observations(AssetRecordsFilter(asset_key=keys.flushed), limit=1).records
    times = [found[0].timestamp] if found else []
    times += [run.started for job in after_jobs if (run := last_run(instance, job)) is not None]
    return max(times, default=None)


def latest_metadata(instance: DagsterInstance, key: AssetKey) -> dict[str, Any] | None:
    """The metadata values of the asset's newest materialization, if any."""
    event = instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return None
    return {name: value.value for name, value in materialization.metadata.items()}


def pending_generations(instance: DagsterInstance, keys: TableKeys) -> str | None:
    """The checks' wait: generations pending in the newest recorded status (their age grows)."""
    status = latest_metadata(instance, keys.status)
    if status is None or status.get("pending_generations", 1):
        return "generations are pending"
    return None


# What GC keeps for a while, until time or a catch-up frees it (a retained version waits on retention).
TIMED_KEPT = (rules.GRACE_PERIOD, rules.INDEX_NOT_CAUGHT_UP, rules.FLUSH_IN_PROGRESS)


def kept_for_a_while(instance: DagsterInstance, keys: TableKeys) -> str | None:
    """GC's wait: generations its last report kept for the grace period, a catch-up or a flush."""
    report = latest_metadata(instance, keys.gc_report)
    if report is None or any(report.get(f"kept_{reason}", 0) for reason in TIMED_KEPT):
        return "the last GC kept generations it may delete now"
    return None


def no_wait(_instance: DagsterInstance, _keys: TableKeys) -> str | None:
    return None


@dataclass(frozen=True)
class Gate:
    """What a gated job's tick reads: what the last run left to time, and the jobs whose runs change
    its answer besides the regions' observations."""

    waiting: Callable[[DagsterInstance, TableKeys], str | None]
    after_jobs: tuple[str, ...] = ()


def sensor_running(instance: DagsterInstance) -> bool:
    """Whether the flushed-generations sensor is switched on (Dagster exports no name for the type)."""
    from dagster._core.scheduler.instigation import InstigatorType

    states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    return any(s.instigator_name == FLUSHED_SENSOR and s.is_running for s in states)


def gated(
    keys: TableKeys, job: JobDefinition, gate: Gate
) -> Callable[[ScheduleEvaluationContext], RunRequest | SkipReason]:
    """The schedule's evaluation: a run when `run_reason` gives one, else a skip saying why."""

    def evaluate(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        instance = context.instance
        at = context.scheduled_execution_time or datetime.now(UTC)
        last = last_run(instance, job.name)
        reason = run_reason(
            watched=keys.table.sensors and sensor_running(instance),
            last=last,
            changed_at=last_change(instance, keys, gate.after_jobs),
            waiting=gate.waiting(instance, keys) if last is not None else None,
            now=at.timestamp(),
        )
        if reason is None:
            return SkipReason("nothing changed since the last run, which passed: nothing to do")
        return RunRequest(tags={"memwal/scheduled_because": reason})

    return evaluate


def table_schedules(keys: TableKeys, jobs: TableJobs) -> list[ScheduleDefinition]:
    """A schedule per periodic job, stopped until switched on in the UI (Dagster's default)."""
    table = keys.table

    def schedule(suffix: str, job: JobDefinition, cron: str, gate: Gate | None = None) -> ScheduleDefinition:
        return ScheduleDefinition(
            name=f"{table.name}_{suffix}_schedule",
            job=job,
            cron_schedule=cron,
            default_status=DefaultScheduleStatus.STOPPED,
            execution_fn=None if gate is None else gated(keys, job, gate),
        )

    return [
        schedule("snapshot", jobs.snapshot, table.snapshot_cron, Gate(no_wait)),
        schedule("checks", jobs.checks, table.checks_cron, Gate(pending_generations, (jobs.catchup.name,))),
        schedule("compaction", jobs.compaction, table.compaction_cron),
        schedule("retention", jobs.retention, table.retention_cron),
        schedule("gc", jobs.gc, table.gc_cron, Gate(kept_for_a_while, (jobs.retention.name,))),
    ]
