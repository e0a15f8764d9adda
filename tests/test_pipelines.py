"""The Dagster code location in process: table list, sensors, jobs and checks on real tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, SensorResult, build_sensor_context
from dagster._core.instance.ref import InstanceRef

from memwal_core.errors import BadInputError
from memwal_core.services.status import status
from memwal_core.table import MemWalTable
from memwal_pipelines.assets import TableKeys
from memwal_pipelines.config import TableConfig, load_tables
from memwal_pipelines.definitions import build_definitions, defs
from tests.support.model import keyed_backlog_table

ROOT = Path(__file__).resolve().parent.parent


def tick(keys: TableKeys, instance: DagsterInstance, cursor: str | None) -> SensorResult:
    sensor = build_definitions([keys.table]).resolve_sensor_def(f"{keys.table.name}_flushed_generations")
    with build_sensor_context(instance=instance, cursor=cursor) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(keys.regions_name, list(request.partition_keys or []))
    return result


def test_default_location_and_table_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert defs.resolve_asset_graph().get_all_asset_keys()
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        "tables:\n  - {name: events, uri: s3://b/events, storage_options_env: EV_OPTS, merge_engine: spark}\n"
        "  - {name: orders, uri: /data/orders, max_backlog_generations: 4}\n"
    )
    monkeypatch.setenv("MEMWAL_TABLES", str(listing))
    tables = load_tables()
    assert [(t.name, t.merge_engine, t.max_backlog_generations) for t in tables] == [
        ("events", "spark", 16),
        ("orders", "local", 4),
    ]
    graph = build_definitions(tables).resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {
        "events/base_table",
        "orders/flushed_generations",
        "orders/region_snapshot",
    }
    listing.write_text("tables:\n  - {name: x, uri: /t, colour: red}\n")
    with pytest.raises(BadInputError, match="unknown key 'colour'"):
        load_tables()


def test_sensor_adds_regions_observes_once_and_keys_runs_by_generation(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    keys = TableKeys(TableConfig(name="t", uri=table.uri))
    instance = DagsterInstance.ephemeral()

    first = tick(keys, instance, None)
    assert sorted(instance.get_dynamic_partitions(keys.regions_name)) == sorted(regions)
    assert sorted(e.partition for e in first.asset_events) == sorted(regions)
    assert sorted(r.partition_key for r in first.run_requests or []) == sorted(regions)
    assert all(r.run_key and r.run_key.endswith(":0:2") for r in first.run_requests or [])

    again = tick(keys, instance, first.cursor)
    assert not again.asset_events, "an unchanged region is not observed again"
    assert not again.dynamic_partitions_requests
    assert {r.run_key for r in again.run_requests or []} == {r.run_key for r in first.run_requests or []}

    newcomer = table.write(None, [("put", [{"id": 5000, "v": "new"}])])
    third = tick(keys, instance, again.cursor)
    assert [list(r.partition_keys or []) for r in third.dynamic_partitions_requests or []] == [[newcomer]]
    assert [e.partition for e in third.asset_events] == [newcomer]
    assert newcomer in {r.partition_key for r in third.run_requests or []}


def run_job(keys: TableKeys, instance: DagsterInstance, job: str, partition: str | None = None) -> Any:
    definitions = build_definitions([keys.table])
    result = definitions.resolve_job_def(f"{keys.table.name}_{job}").execute_in_process(
        instance=instance, partition_key=partition
    )
    assert result.success
    return result


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_jobs_merge_catch_up_snapshot_and_check_a_real_table(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")  # the shared session: the lazy resource reuses it
    table, regions = keyed_backlog_table(tmp_path / "t")
    table.dataset().create_scalar_index("id", "BTREE")
    keys = TableKeys(TableConfig(name="t", uri=table.uri, merge_engine=engine))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, regions)

    for region in regions:
        merged = run_job(keys, instance, "merge", region)
        metadata = merged.get_asset_materialization_events()[0].materialization.metadata
        assert metadata["generations_merged"].value == 2
        assert metadata["merged_generation"].value == 2
    table.assert_merged()

    caught_up = run_job(keys, instance, "catchup").get_asset_materialization_events()[0]
    assert caught_up.materialization.metadata["max_lag_after"].value == 0
    snapshot = run_job(keys, instance, "snapshot")
    assert {e.asset_key.to_user_string() for e in snapshot.get_asset_materialization_events()} == {
        "t/region_snapshot",
        "t/status",
    }
    checks = run_job(keys, instance, "checks").get_asset_check_evaluations()
    assert {c.check_name: c.passed for c in checks} == {
        "merge_backlog": True,
        "index_lag": True,
        "lsm_consistency": True,
    }
    with MemWalTable.open(table.uri) as opened:
        assert status(opened).pending_total == 0


def test_checks_fail_on_a_backlog_and_a_missing_generation(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t", regions=1, rounds=3)
    keys = TableKeys(TableConfig(name="t", uri=table.uri, max_backlog_generations=2))
    instance = DagsterInstance.ephemeral()
    definitions = build_definitions([keys.table])
    checks = definitions.resolve_job_def("t_checks").execute_in_process(
        instance=instance, raise_on_error=False
    )
    verdicts = {c.check_name: c.passed for c in checks.get_asset_check_evaluations()}
    assert verdicts["merge_backlog"] is False, "3 pending generations exceed the threshold of 2"
    assert verdicts["lsm_consistency"] is True

    with MemWalTable.open(table.uri) as opened:
        victim = opened.region_store(regions[0]).read_latest().generations[0].path
    for path in sorted((Path(table.uri) / "_mem_wal" / regions[0] / victim).rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (Path(table.uri) / "_mem_wal" / regions[0] / victim).rmdir()
    checks = definitions.resolve_job_def("t_checks").execute_in_process(
        instance=instance, raise_on_error=False
    )
    evaluations = {c.check_name: c for c in checks.get_asset_check_evaluations()}
    assert evaluations["lsm_consistency"].passed is False
    assert "LSM read failed" in str(evaluations["lsm_consistency"].metadata["result"].value)


def test_main_command_runs_the_whole_pipeline_once(tmp_path: Path) -> None:
    """The README's first command: demo table, every job once, runs kept in a local instance."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    proc = subprocess.run(
        [sys.executable, "-m", "memwal_pipelines", "demo", "demo/table"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 pending generation(s)" in proc.stdout
    with MemWalTable.open(str(tmp_path / "demo" / "table")) as opened:
        assert status(opened).pending_total == 0
    home = tmp_path / ".dagster_home"
    runs = DagsterInstance.from_ref(InstanceRef.from_dir(str(home))).get_runs()
    jobs = sorted(r.job_name for r in runs)
    assert jobs == ["demo_catchup", "demo_checks", *["demo_merge"] * 3, "demo_snapshot"]
    assert all(r.is_success for r in runs)


def test_ingest_job_loads_files_and_the_sensor_merges_them(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tests.test_ingest import model_of, source_rows
    from tests.test_writer import make_table

    uri = make_table(tmp_path / "t")
    rows = source_rows(5000)
    pq.write_table(rows, tmp_path / "src.parquet")
    keys = TableKeys(TableConfig(name="t", uri=uri))
    instance = DagsterInstance.ephemeral()
    definitions = build_definitions([keys.table])
    result = definitions.resolve_job_def("t_ingest").execute_in_process(
        instance=instance,
        run_config={"ops": {"t_ingest_files": {"config": {"sources": [str(tmp_path / "*.parquet")]}}}},
    )
    assert result.success
    output = result.output_for_node("t_ingest_files")
    assert output["rows_written"] == 5000 and len(output["regions"]) == 4
    requests = tick(keys, instance, None).run_requests or []
    assert sorted(r.partition_key or "" for r in requests) == sorted(r["region"] for r in output["regions"])
    for request in requests:
        run_job(keys, instance, "merge", request.partition_key)
    with MemWalTable.open(uri) as opened:
        merged = {r["id"]: (r["name"], r["score"]) for r in opened.dataset().to_table().to_pylist()}
    assert merged == model_of(rows)


def test_ingest_job_refuses_a_missing_source(tmp_path: Path) -> None:
    from tests.test_writer import make_table

    keys = TableKeys(TableConfig(name="t", uri=make_table(tmp_path / "t")))
    result = (
        build_definitions([keys.table])
        .resolve_job_def("t_ingest")
        .execute_in_process(
            instance=DagsterInstance.ephemeral(),
            run_config={"ops": {"t_ingest_files": {"config": {"sources": [str(tmp_path / "none.parquet")]}}}},
            raise_on_error=False,
        )
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "source" in str(failure.event_specific_data) and "does not exist" in str(
        failure.event_specific_data
    )
