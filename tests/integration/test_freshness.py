"""The base table's FreshnessPolicy: the state Dagster's freshness daemon records follows the merge lag.

A real daemon and webserver (its freshness daemon set to look every 2 s): a
table whose oldest pending generation was flushed ten minutes ago is stale
(FAIL) with a two-minute threshold while its merge waits at its commit (this
test holds the index-details lease, as a compaction would), then fresh (PASS)
once merged, and the sensor's tick records the completion time the policy
reads. In process, the recorded time is exactly the exporter's lag.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dagster import AssetKey, DagsterInstance
from dagster._core.definitions.freshness import FreshnessState
from dagster._core.instance.ref import InstanceRef

from memwal_core.model.details_lease import details_lease
from memwal_core.model.table import MemWalTable
from memwal_core.services.watch import TableWatch
from memwal_pipelines.config import TableConfig
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.integration.test_pipelines import tick
from tests.support.dagster import DagsterDeployment
from tests.support.model import ModelTable, keyed_backlog_table
from tests.support.prometheus import wait_for

THRESHOLD = 120
AGED = 600


def age_oldest_generation(table: ModelTable, region: str, seconds: float) -> None:
    """Make the region's oldest generation look flushed `seconds` ago (its files' modification times)."""
    with MemWalTable.open(table.uri) as opened:
        oldest = opened.region_store(region).read_latest().generations[0].path
    then = time.time() - seconds
    for path in (Path(table.uri) / "_mem_wal" / region / oldest).rglob("*"):
        os.utime(path, (then, then))


def freshness(instance: DagsterInstance, key: AssetKey) -> FreshnessState | None:
    record = instance.get_freshness_state_records([key]).get(key)
    return record.freshness_state if record else None


def test_the_sensor_stamps_the_completion_time_the_exporter_reports_as_lag(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    age_oldest_generation(table, regions[0], AGED)
    keys = TableKeys(TableConfig(name="t", uri=table.uri, max_pending_age_seconds=THRESHOLD))
    instance = DagsterInstance.ephemeral()
    tick(keys, instance, None)
    latest = instance.get_latest_materialization_event(keys.base)
    assert latest is not None and latest.asset_materialization is not None
    with MemWalTable.open(table.uri) as opened:
        reading = TableWatch(opened).read()
    lag = max(r.backlog.oldest_pending_age(reading.read_at) for r in reading.regions)
    assert abs((reading.read_at - latest.timestamp) - lag) < 5, "Dagster's age of the asset is the lag"
    assert lag > AGED - 5


def test_dagster_records_the_base_table_stale_then_fresh(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    age_oldest_generation(table, regions[0], AGED)
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        f"tables:\n  - {{name: fresh, uri: '{table.uri}', merge_engine: local, sensor_interval_seconds: 2, "
        f"status_interval_seconds: 1, max_pending_age_seconds: {THRESHOLD}}}\n"
    )
    key = AssetKey(["fresh", "base_table"])
    with (
        DagsterDeployment(listing, env={"FRESHNESS_DAEMON_INTERVAL_SECONDS": "2"}) as running,
        MemWalTable.open(table.uri) as opened,
    ):
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home)))
        with details_lease(opened.store, ttl=600, wait=0):  # the merge waits at its commit meanwhile
            assert running.start_sensor(FLUSHED_SENSOR) == "RUNNING"
            wait_for(
                "Dagster records the table stale",
                lambda: freshness(instance, key) == FreshnessState.FAIL,
                180,
            )
        wait_for(
            "Dagster records the table fresh", lambda: freshness(instance, key) == FreshnessState.PASS, 300
        )
    table.assert_merged()
