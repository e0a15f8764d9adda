"""No wedge after a daemon crash: kill -9 of dagster-daemon's whole process tree mid-run, then a restart.

The operator's bad day from issue 36: one merge run STARTED (here held at its
commit by the index-details lease, which this test holds as a compaction
would), one QUEUED behind it in the table's one-slot pool, then the daemon,
its code server and the run worker killed at once. Dagster cannot see that
the worker is gone; the merge job's `dagster/max_runtime` tag makes its run
monitoring fail the dead run, which frees the pool, the queued round starts,
and memwal's leases (the dead worker's are free at once on this host) let it
merge. The table must converge within the stated bound.
"""

from __future__ import annotations

import time
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef

from memwal_core.model.details_lease import details_lease
from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_pipelines.config import TableConfig
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.support.dagster import DagsterDeployment
from tests.support.model import keyed_backlog_table
from tests.support.prometheus import wait_for

MAX_RUNTIME = 60
# dagster.yaml: run monitoring looks every 30 s, and frees a dead run's slots 60 s after it ended.
POLL_SECONDS, FREE_SLOTS_SECONDS = 30, 60
BOUND = MAX_RUNTIME + POLL_SECONDS + FREE_SLOTS_SECONDS


def runs(instance: DagsterInstance, *statuses: DagsterRunStatus) -> list[str]:
    return [r.run_id for r in instance.get_runs(RunsFilter(job_name="crash_merge", statuses=list(statuses)))]


def pending(uri: str) -> int:
    with MemWalTable.open(uri) as opened:
        return status(opened).pending_total


def test_merges_resume_after_kill_9_of_the_daemon_tree_during_a_merge_run(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    config = TableConfig(
        name="crash",
        uri=table.uri,
        merge_engine="local",
        sensor_interval_seconds=2,
        merge_max_runtime_seconds=MAX_RUNTIME,
    )
    assert config.merge_max_runtime() == MAX_RUNTIME
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        f"tables:\n  - {{name: crash, uri: '{table.uri}', merge_engine: local, sensor_interval_seconds: 2, "
        f"merge_max_runtime_seconds: {MAX_RUNTIME}}}\n"
    )
    with DagsterDeployment(listing) as running, MemWalTable.open(table.uri) as opened:
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home)))
        with details_lease(opened.store, ttl=600, wait=0):
            assert running.start_sensor(FLUSHED_SENSOR) == "RUNNING"
            (stuck,) = wait_for("a merge run started", lambda: runs(instance, DagsterRunStatus.STARTED), 180)
            # A flush while the round runs: the sensor queues the next round behind it.
            table.write(regions[0], [("put", [{"id": 7000 + k, "v": "late"} for k in range(4)])])
            wait_for("a merge run queued", lambda: runs(instance, DagsterRunStatus.QUEUED), 120)
            killed = running.kill_tree("daemon")
        assert len(killed) >= 3, f"the daemon, its code server and the run worker: {killed}"
        assert runs(instance, DagsterRunStatus.STARTED) == [stuck], "Dagster cannot see the worker is gone"

        restarted = time.monotonic()
        running.restart_process("daemon")
        wait_for("the table merged after the restart", lambda: pending(table.uri) == 0, BOUND + 120)
        resumed = time.monotonic() - restarted
        print(
            f"merges resumed {resumed:.0f} s after the daemon's restart (bound {BOUND} s + the run's own time)"
        )
        failed = instance.get_run_by_id(stuck)
        assert failed is not None and failed.status == DagsterRunStatus.FAILURE
    table.assert_merged()
    assert resumed < BOUND + 60, f"{resumed:.0f} s"


def test_with_the_deployed_code_server_a_daemon_crash_leaves_the_merge_run_running(tmp_path: Path) -> None:
    """docs/deploy/: the location served by memwal-code-server.service's command. The daemon starts
    no code server of its own, and the code server launches the runs, so kill -9 of the daemon's
    whole tree mid-run kills no run: the held merge run finishes and the table converges."""
    table, _ = keyed_backlog_table(tmp_path / "t")
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        f"tables:\n  - {{name: crash, uri: '{table.uri}', merge_engine: local, sensor_interval_seconds: 2}}\n"
    )
    with (
        DagsterDeployment(listing, code_server=True) as running,
        MemWalTable.open(table.uri) as opened,
    ):
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home)))
        with details_lease(opened.store, ttl=600, wait=0):
            assert running.start_sensor(FLUSHED_SENSOR) == "RUNNING"
            (held,) = wait_for("a merge run started", lambda: runs(instance, DagsterRunStatus.STARTED), 180)
            killed = running.kill_tree("daemon")
        assert killed == [running.pids["daemon"]], (
            f"the daemon alone, no code server or run below it: {killed}"
        )
        wait_for("the held run merged", lambda: pending(table.uri) == 0, 180)
        running.restart_process("daemon")
        finished = wait_for(
            "the held run recorded as a success",
            lambda: (r := instance.get_run_by_id(held)) is not None and r.status == DagsterRunStatus.SUCCESS,
            120,
        )
        assert finished
    table.assert_merged()
