"""The scheduled snapshot, checks and GC of an idle table start no run; a region that moves starts them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dagster import (
    AssetMaterialization,
    AssetObservation,
    DagsterInstance,
    SensorResult,
    build_schedule_context,
    instance_for_test,
)
from dagster._core.remote_origin import (
    InProcessCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import InstigatorState, InstigatorStatus, InstigatorType
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from memwal_core.model.table import MemWalTable
from memwal_core.services.retain import retain
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.integration.test_pipelines import run_job, tick
from tests.support.model import ModelTable, keyed_backlog_table


def switch_on_flushed_sensor(instance: DagsterInstance) -> None:
    """The state the UI's toggle stores for the flushed-generations sensor."""
    location = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name="memwal_pipelines.definitions"))
    origin = RemoteInstigatorOrigin(RemoteRepositoryOrigin(location, "__repository__"), FLUSHED_SENSOR)
    instance.add_instigator_state(InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.RUNNING))


def record(instance: DagsterInstance, result: SensorResult) -> None:
    """Store a sensor tick's observations and status, as the daemon does."""
    for event in result.asset_events:
        assert isinstance(event, AssetObservation | AssetMaterialization)
        instance.report_runless_asset_event(event)


def evaluate(keys: TableKeys, instance: DagsterInstance, job: str) -> str | None:
    """A scheduled tick of the table's `job`: the reason it gave for a run, or None when it skipped."""
    definitions = build_definitions([keys.table])
    schedule = definitions.resolve_schedule_def(f"{keys.table.name}_{job}_schedule")
    with build_schedule_context(instance=instance, scheduled_execution_time=datetime.now(UTC)) as context:
        data = schedule.evaluate_tick(context)
    if not data.run_requests:
        assert data.skip_message and "nothing to do" in data.skip_message
        return None
    (request,) = data.run_requests
    return request.tags.get("memwal/scheduled_because", "ungated")


def test_an_idle_table_starts_no_snapshot_checks_or_gc_run_until_a_region_moves(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    keys = TableKeys(TableConfig(name="t", uri=table.uri))
    with instance_for_test() as instance:
        idle_then_moved(table, regions, keys, instance)


def idle_then_moved(
    table: ModelTable, regions: list[str], keys: TableKeys, instance: DagsterInstance
) -> None:
    assert evaluate(keys, instance, "snapshot") == "the sensors do not watch this table"
    switch_on_flushed_sensor(instance)
    assert evaluate(keys, instance, "snapshot") == "no run yet"

    record(instance, cursor_tick := tick(keys, instance, None))
    for region in regions:
        run_job(keys, instance, "merge", region)
    cursor = tick(keys, instance, cursor_tick.cursor)  # it sees the merges
    record(instance, cursor)
    run_job(keys, instance, "snapshot")
    run_job(keys, instance, "checks")
    run_job(keys, instance, "gc")
    record(instance, cursor := tick(keys, instance, cursor.cursor))
    assert not cursor.asset_events, "an idle tick records nothing"
    assert evaluate(keys, instance, "snapshot") is None
    assert evaluate(keys, instance, "checks") is None
    # GC kept the merged generations for the old table versions: it waits for a retention run.
    assert evaluate(keys, instance, "gc") is None
    run_job(keys, instance, "retention")
    assert evaluate(keys, instance, "gc") == "the table changed since the last run"
    with MemWalTable.open(table.uri) as opened:
        retain(opened, older_than=timedelta(0), force=True)
    run_job(keys, instance, "gc")
    # Now they wait for the grace period alone: GC runs again until they are gone.
    assert evaluate(keys, instance, "gc") == "the last GC kept generations it may delete now"
    grace_over = TableKeys(replace(keys.table, gc_grace_seconds=0))
    run_job(grace_over, instance, "gc")
    assert evaluate(grace_over, instance, "gc") is None
    # Compaction and retention are not gated: they work on the base table's versions and fragments.
    assert evaluate(keys, instance, "compaction") == "ungated"

    table.write(regions[0], [("put", [{"id": 7, "v": "moved"}])], memtable_rows=50)
    record(instance, tick(keys, instance, cursor.cursor))
    for job in ("snapshot", "checks", "gc"):
        assert evaluate(keys, instance, job) == "the table changed since the last run"
