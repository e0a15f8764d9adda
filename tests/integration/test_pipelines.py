"""The Dagster code location in process: table list, sensors, jobs and checks on real tables."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetMaterialization,
    AssetObservation,
    DagsterInstance,
    DagsterRunStatus,
    PartitionKeyRange,
    RunRequest,
    SensorResult,
    build_sensor_context,
)
from dagster._core.instance.ref import InstanceRef
from dagster._core.test_utils import create_run_for_test

from memwal_core.errors import BadInputError
from memwal_core.model.table import MemWalTable
from memwal_core.services.retain import retain
from memwal_core.services.status import status
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig, load_tables
from memwal_pipelines.definitions import defs
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import COMPACTION_SENSOR, FLUSHED_SENSOR, flushed_tick
from memwal_pipelines.warm_spark import warm_home
from tests.support.browser import (
    ARTIFACTS,
    COMMUNITY_DIALOG,
    COMMUNITY_DIALOG_DELAY_MS,
    keep_for_readme,
    launch_browser,
)
from tests.support.dagster import LOCATION, location_loaded
from tests.support.model import KEYED_SCHEMA, ModelTable, keyed_backlog_table
from tests.support.paths import PROJECT_ROOT
from tests.support.service import LOOPBACK, free_ports, start_server, stop_process_group

RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def tick(keys: TableKeys, instance: DagsterInstance, cursor: str | None) -> SensorResult:
    definitions = build_definitions([keys.table])
    sensor = definitions.resolve_sensor_def(FLUSHED_SENSOR)
    with build_sensor_context(instance=instance, cursor=cursor, resources=definitions.resources) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(keys.regions_name, list(request.partition_keys or []))
    return result


def observed(result: SensorResult) -> list[str | None]:
    """The regions a sensor tick observed (its flushed_generations observations)."""
    return [e.partition for e in result.asset_events if isinstance(e, AssetObservation)]


def status_recorded(result: SensorResult) -> list[dict[str, Any]]:
    """The metadata values of the status materializations a sensor tick recorded."""
    return [
        {k: v.value for k, v in e.metadata.items()}
        for e in result.asset_events
        if isinstance(e, AssetMaterialization) and e.asset_key.path[-1] == "status"
    ]


def assert_plottable(events: list[dict[str, Any]]) -> None:
    """The same keys in every event, each always an int or always a float: one plot per key.

    `engine` and `engine_reason` are the text labels (where the work ran, and why there), which the UI
    shows and does not plot.
    """
    labels = ("engine", "engine_reason")
    assert len({tuple(sorted(e)) for e in events}) == 1, "every event has the same keys"
    assert all(isinstance(e.get(k, ""), str) for e in events for k in labels)
    kinds = {(k, type(v)) for e in events for k, v in e.items() if k not in labels}
    assert {kind for _, kind in kinds} <= {int, float}, kinds
    assert len(kinds) == len([k for k in events[0] if k not in labels]), kinds


def test_default_location_and_table_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert defs.resolve_asset_graph().get_all_asset_keys()
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        "tables:\n  - {name: events, uri: s3://b/events, storage_options_env: EV_OPTS, merge_engine: local}\n"
        "  - {name: orders, uri: /data/orders, max_backlog_generations: 4}\n"
    )
    monkeypatch.setenv("MEMWAL_TABLES", str(listing))
    tables = load_tables()
    assert [(t.name, t.merge_engine, t.max_backlog_generations) for t in tables] == [
        ("events", "local", 16),
        ("orders", "spark", 4),  # the default
    ]
    graph = build_definitions(tables).resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {
        "events/base_table",
        "orders/flushed_generations",
        "orders/region_snapshot",
    }
    assert "orders/gc_report" in {k.to_user_string() for k in graph.get_all_asset_keys()}
    listing.write_text("tables:\n  - {name: x, uri: /t, colour: red}\n")
    with pytest.raises(BadInputError, match="unknown key 'colour'"):
        load_tables()
    listing.write_text("tables:\n  - {name: x, uri: /t, max_batch_rows: 0}\n")
    with pytest.raises(BadInputError, match="max_batch_rows must be at least 1"):
        load_tables()
    listing.write_text("tables:\n  - {name: x, uri: /t, status_interval_seconds: -1}\n")
    with pytest.raises(BadInputError, match="status_interval_seconds must be a finite number at least 0"):
        load_tables()
    listing.write_text("tables:\n  - {name: x, uri: /t, retain_older_than: 30m}\n")
    with pytest.raises(BadInputError, match="retain_older_than: must be at least"):
        load_tables()


def test_sensor_adds_regions_observes_once_and_keys_runs_by_generation(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    keys = TableKeys(TableConfig(name="t", uri=table.uri))
    instance = DagsterInstance.ephemeral()

    first = tick(keys, instance, None)
    assert sorted(instance.get_dynamic_partitions(keys.regions_name)) == sorted(regions)
    assert sorted(observed(first)) == sorted(regions)
    assert_plottable(
        [
            {k: v.value for k, v in e.metadata.items()}
            for e in first.asset_events
            if isinstance(e, AssetObservation)
        ]
    )
    (round_request,) = first.run_requests or []
    partitions = instance.get_dynamic_partitions(keys.regions_name)
    assert round_request.partition_key_range == PartitionKeyRange(partitions[0], partitions[-1])

    again = tick(keys, instance, first.cursor)
    assert not again.asset_events, "an unchanged region is not observed again, nor the status recorded"
    assert not again.dynamic_partitions_requests
    assert {r.run_key for r in again.run_requests or []} == {r.run_key for r in first.run_requests or []}

    newcomer = table.write(None, [("put", [{"id": 5000, "v": "new"}])])
    third = tick(keys, instance, again.cursor)
    assert [list(r.partition_keys or []) for r in third.dynamic_partitions_requests or []] == [[newcomer]]
    assert observed(third) == [newcomer]
    (newer,) = third.run_requests or []
    assert newer.run_key != round_request.run_key, "a new flush starts a new round"
    assert newer.partition_key_range == PartitionKeyRange(partitions[0], newcomer)


def test_a_backlog_still_pending_past_the_lag_threshold_is_asked_for_again(tmp_path: Path) -> None:
    """Dagster starts no run for a run key it has seen: a round that failed, and Dagster's retries too
    (a code server restarting when they launched, storage down; bench/chaos.py), left its backlog
    with no merge until the next flush. Past the table's lag threshold, counted from the oldest
    pending flush, the same backlog takes a new key each threshold."""
    table, _ = keyed_backlog_table(tmp_path / "t")
    keys = TableKeys(TableConfig(name="t", uri=table.uri, max_pending_age_seconds=60))
    instance = DagsterInstance.ephemeral()
    first = tick(keys, instance, None)
    (asked,) = first.run_requests or []

    def round_key(later: float) -> str | None:
        with build_sensor_context(instance=instance) as context:
            found = flushed_tick(context, keys, first.cursor, False, now=time.time() + later)
        return None if found.round is None else found.round.run_key

    assert round_key(0) == asked.run_key, "within the threshold the same backlog asks nothing new"
    assert round_key(65) == f"{asked.run_key}:1"
    assert round_key(125) == f"{asked.run_key}:2"


def test_sensor_records_which_regions_are_behind_in_the_status(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    table.write(regions[1], [("put", [{"id": 1000 + k, "v": "more"} for k in range(8)])])
    keys = TableKeys(TableConfig(name="t", uri=table.uri, status_interval_seconds=0))
    instance = DagsterInstance.ephemeral()

    first = tick(keys, instance, None)
    (behind,) = status_recorded(first)
    assert {k: behind[k] for k in ("regions", "regions_behind", "pending_generations")} == {
        "regions": 2,
        "regions_behind": 2,
        "pending_generations": 5,
    }
    assert behind["pending_bytes"] > 0 and behind["max_oldest_pending_age_seconds"] >= 0
    assert [r["region"] for r in behind["result"]["regions"]] == sorted(regions), "the status JSON, as before"
    rows = [line for line in behind["regions_table"].splitlines() if "| **behind** |" in line]
    assert len(rows) == 2 and regions[1] in rows[0] and "| **3** |" in rows[0], "most pending first"
    assert regions[0] in rows[1] and "| **2** |" in rows[1]
    assert not status_recorded(tick(keys, instance, first.cursor)), "nothing changed, nothing recorded"

    run_job(keys, instance, "merge", regions[0])
    (after,) = status_recorded(tick(keys, instance, first.cursor))
    assert (after["regions_behind"], after["pending_generations"]) == (1, 3)
    caught_up = next(line for line in after["regions_table"].splitlines() if regions[0] in line)
    assert "| caught up | 0 |" in caught_up
    # The snapshot job records the same view of the status.
    snapshot = materialized(run_job(keys, instance, "snapshot"), "status")
    assert snapshot.keys() == after.keys() and snapshot["regions_behind"] == 1

    # At most one status per status_interval_seconds; a cursor of the earlier flat form still reads.
    hourly = TableKeys(replace(keys.table, status_interval_seconds=3600))
    flat = json.dumps({"t": json.dumps({r: "0:0" for r in regions})})
    assert status_recorded(tick(hourly, instance, flat)), "no status recorded yet"
    recorded = tick(hourly, instance, flat).cursor
    run_job(keys, instance, "merge", regions[1])
    later = tick(hourly, instance, recorded)
    assert observed(later) == [regions[1]] and not status_recorded(later)


def test_one_tick_one_run_merges_sixteen_regions_each_with_its_own_figures(tmp_path: Path) -> None:
    table = ModelTable(tmp_path / "t", KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(100)])
    generations = {}
    for r in range(16):
        region = str(uuid.UUID(int=r + 1, version=4))
        generations[region] = r % 3 + 1
        for g in range(generations[region]):
            rows = [{"id": 1000 * r + k, "v": f"g{g}"} for k in range(r + 1)]
            table.write(region, [("put", rows)], memtable_rows=100)
    keys = TableKeys(TableConfig(name="t", uri=table.uri))
    instance = DagsterInstance.ephemeral()
    first = tick(keys, instance, None)
    assert len(first.run_requests or []) == 1, "one run for the whole round"
    result = run_job(keys, instance, "merge", tags=(first.run_requests or [])[0].tags)
    figures = {
        e.partition: {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }
    assert set(figures) == set(generations)
    for r, (region, count) in enumerate(generations.items()):
        assert figures[region]["generations_merged"] == count
        assert figures[region]["merged_generation"] == count
        assert figures[region]["rows_upserted"] == r + 1
        assert figures[region]["regions_in_commit"] == 16
    assert len({f["table_version"] for f in figures.values()}) == 1, "one commit"
    # Each merged region's backlog is observed again after the round: the UI shows it caught up.
    refreshed = {
        e.asset_observation_data.asset_observation.partition: e.asset_observation_data.asset_observation.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    }
    assert set(refreshed) == set(generations)
    assert all(m["pending_generations"].value == 0 for m in refreshed.values())
    assert_plottable(list(figures.values()))
    assert_plottable([{k: v.value for k, v in m.items()} for m in refreshed.values()])
    assert {r: m["merged_generation"].value for r, m in refreshed.items()} == generations
    table.assert_merged()
    after = tick(keys, instance, first.cursor)
    assert not after.run_requests, "nothing pending, no run"
    assert len(observed(after)) == 16, "a region whose merged generation changed is observed again"


def test_a_backfill_of_a_region_range_merges_just_those_regions_in_one_run(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t", regions=4)
    keys = TableKeys(TableConfig(name="t", uri=table.uri))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, regions)
    chosen = regions[1:3]
    # What the UI's single-run backfill launches for a contiguous selection of partitions.
    result = run_job(
        keys, instance, "merge", tags=dict(zip(RANGE_TAGS, [chosen[0], chosen[-1]], strict=True))
    )
    assert sorted(e.partition for e in result.get_asset_materialization_events()) == sorted(chosen)
    with MemWalTable.open(table.uri) as opened:
        pending = {r.region for r in status(opened).regions if r.pending_generations}
    assert pending == {regions[0], regions[3]}


def run_job(
    keys: TableKeys,
    instance: DagsterInstance,
    job: str,
    partition: str | None = None,
    *,
    succeeds: bool = True,
    tags: Mapping[str, str] | None = None,
) -> Any:
    definitions = build_definitions([keys.table])
    result = definitions.resolve_job_def(f"{keys.table.name}_{job}").execute_in_process(
        instance=instance, partition_key=partition, raise_on_error=False, tags=tags
    )
    assert result.success is succeeds
    return result


def materialized(result: Any, asset: str) -> dict[str, Any]:
    """The metadata values of the one materialization of `asset` in a run."""
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == asset]
    assert len(events) == 1, f"{asset} materialized {len(events)} times"
    return {k: v.value for k, v in events[0].materialization.metadata.items()}


def verdicts(result: Any) -> dict[str, bool]:
    return {c.check_name: c.passed for c in result.get_asset_check_evaluations()}


@pytest.mark.parametrize("engine", ["local", "spark", "connect"])
def test_jobs_merge_catch_up_snapshot_and_check_a_real_table(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark comes from the pipeline's dagster-pyspark resource: the shared classic session, or a Connect
    session on the shared server when MEMWAL_SPARK_REMOTE names it."""
    if engine == "spark":
        request.getfixturevalue("spark")  # the shared session: the lazy resource reuses it
    if engine == "connect":
        monkeypatch.setenv("MEMWAL_SPARK_REMOTE", request.getfixturevalue("connect_server").url)
    table, regions = keyed_backlog_table(tmp_path / "t")
    table.dataset().create_scalar_index("id", "BTREE")
    kind = "local" if engine == "local" else "spark"
    # No threshold: these rounds are small, and the default one would keep them in this process.
    keys = TableKeys(TableConfig(name="t", uri=table.uri, merge_engine=kind, spark_min_rows=0))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, regions)

    for region in regions:
        merged = run_job(keys, instance, "merge", region)
        metadata = merged.get_asset_materialization_events()[0].materialization.metadata
        assert metadata["generations_merged"].value == 2 and metadata["engine"].value == kind
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
        "gc_backlog": True,
    }
    with MemWalTable.open(table.uri) as opened:
        assert status(opened).pending_total == 0
    # Compaction on the same engine; Lance drops the rewritten index's catch-up record, compaction restores it.
    compacted = materialized(run_job(keys, instance, "compaction"), "compaction")
    assert compacted["fragments_after"] == 1 and compacted["result"]["catchup_restored"] == ["id_idx"]
    assert compacted["engine"] == kind
    table.assert_merged()
    assert verdicts(run_job(keys, instance, "checks"))["index_lag"] is True


def test_a_spark_table_merges_a_small_round_in_the_run_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the table's Spark threshold no session is opened: the pipeline's Spark here is a Connect
    server nobody runs, which a session would fail on."""
    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", "sc://127.0.0.1:9")
    table, regions = keyed_backlog_table(tmp_path / "t", regions=1)
    keys = TableKeys(TableConfig(name="t", uri=table.uri, merge_engine="spark", spark_min_bytes=1 << 30))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, regions)
    metadata = (
        run_job(keys, instance, "merge", regions[0]).get_asset_materialization_events()[0].materialization
    )
    assert metadata.metadata["engine"].value == "local"
    reason = str(metadata.metadata["engine_reason"].value)
    assert re.fullmatch(r"\d+ rows < spark_min_rows 500,000 and 0\.0 MiB < spark_min_bytes 1,024 MiB", reason)
    table.assert_merged()


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
    consistency = evaluations["lsm_consistency"]
    assert consistency.passed is False
    assert "LSM read failed" in str(consistency.metadata["result"].value)
    # Why, in the check's description and metadata: the region that cannot be read, not "0 rows".
    assert consistency.description is not None and regions[0] in consistency.description
    assert consistency.description.startswith(f"not checked: LSM read failed: region {regions[0]}: ")
    assert consistency.metadata["unreadable_region"].value == regions[0]
    assert victim in consistency.metadata["error"].value


def compaction_tick(keys: TableKeys, instance: DagsterInstance) -> RunRequest | None:
    """The compaction run the location's compaction sensor asks for, if any."""
    definitions = build_definitions([keys.table])
    sensor = definitions.resolve_sensor_def(COMPACTION_SENSOR)
    with build_sensor_context(instance=instance, resources=definitions.resources) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    (request,) = result.run_requests or [None]
    return request


def test_fragment_sensor_compaction_and_retention_on_a_real_table(tmp_path: Path) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t")
    config = TableConfig(name="t", uri=table.uri)
    keys = TableKeys(config)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, regions)
    for region in regions:
        run_job(keys, instance, "merge", region)
    fragments = len(table.dataset().get_fragments())
    assert fragments >= 3, "every merge leaves a fragment behind"

    below = compaction_tick(TableKeys(replace(config, compaction_fragment_threshold=fragments + 1)), instance)
    assert below is None, "under the threshold: no run"
    crossing = TableKeys(replace(config, compaction_fragment_threshold=fragments))
    first, again = compaction_tick(crossing, instance), compaction_tick(crossing, instance)
    assert first is not None and again is not None
    assert first.run_key == again.run_key == f"t:compaction:{table.dataset().version}"
    busy = DagsterInstance.ephemeral()
    create_run_for_test(busy, job_name="t_compaction", status=DagsterRunStatus.STARTED)
    assert compaction_tick(crossing, busy) is None, "one compaction running is enough"

    compacted = materialized(run_job(crossing, instance, "compaction"), "compaction")
    assert (compacted["fragments_before"], compacted["fragments_after"]) == (fragments, 1)
    assert compacted["rows_rewritten"] == len(table.rows) and compacted["seconds"] > 0
    table.assert_merged()
    assert compaction_tick(crossing, instance) is None, "compacted: under the threshold again"

    versions = len(table.dataset().versions())
    kept = materialized(run_job(keys, instance, "retention"), "retention")
    # The default keeps a week of versions: on a fresh table, every one of them.
    assert kept["versions_before"] == versions and kept["versions_removed"] == 0
    assert kept["oldest_retained_version"] == 1
    table.assert_merged()


def test_gc_runs_only_after_the_consistency_check_passes(tmp_path: Path) -> None:
    table, (merged, pending) = keyed_backlog_table(tmp_path / "t")
    keys = TableKeys(TableConfig(name="t", uri=table.uri, gc_grace_seconds=0, max_gc_backlog_generations=1))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(keys.regions_name, [merged, pending])
    run_job(keys, instance, "merge", merged)
    with MemWalTable.open(table.uri) as opened:
        # Old versions pin merged generations (time travel); release them as a retention run would.
        retain(opened, older_than=timedelta(0), force=True)
        merged_dirs = [g.path for g in opened.region_store(merged).read_latest().generations]
        victim = opened.region_store(pending).read_latest().generations[0].path
    region_dir = Path(table.uri) / "_mem_wal"
    assert all((region_dir / merged / d).is_dir() for d in merged_dirs) and len(merged_dirs) == 2

    checks = run_job(keys, instance, "checks", succeeds=True)
    assert verdicts(checks)["gc_backlog"] is False, "2 merged generations wait for GC, the threshold is 1"

    # A pending generation that cannot be read: the LSM view is broken, so GC must not delete anything.
    shutil.move(region_dir / pending / victim, tmp_path / "aside")
    refused = run_job(keys, instance, "gc", succeeds=False)
    assert verdicts(refused) == {"lsm_consistency": False}
    assert not refused.get_asset_materialization_events(), "GC did not run"
    assert all((region_dir / merged / d).is_dir() for d in merged_dirs)

    shutil.move(tmp_path / "aside", region_dir / pending / victim)
    collected = run_job(keys, instance, "gc")
    assert verdicts(collected) == {"lsm_consistency": True, "gc_backlog": True}
    report = materialized(collected, "gc_report")
    assert report["generations_deleted"] == 2 and report["bytes_deleted"] > 0
    assert report["kept_not_merged"] == 2 and report["kept_retained_version"] == 0
    assert not any((region_dir / merged / d).exists() for d in merged_dirs)
    run_job(keys, instance, "merge", pending)
    table.assert_merged()


def test_main_command_runs_the_whole_pipeline_once(tmp_path: Path) -> None:
    """The README's first command: demo table, every job once, runs kept in a local instance."""
    # A DAGSTER_HOME of the user's own (the default, the project root, would fill the checkout).
    home = tmp_path / "dagster-home"
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "memwal_pipelines", "demo", "demo/table"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 pending generation(s)" in proc.stdout
    # Quiet by default: one line per run and the status once; Dagster's own logs only with --verbose.
    assert len(proc.stdout.splitlines()) == 7 + 2 + 3, proc.stdout
    assert proc.stdout.count("pending generation(s)") == 1
    assert len(proc.stderr.splitlines()) <= 5 and "DEBUG" not in proc.stderr, proc.stderr[-2000:]
    with MemWalTable.open(str(tmp_path / "demo" / "table")) as opened:
        assert status(opened).pending_total == 0
    assert (home / "dagster.yaml").read_text() == (PROJECT_ROOT / "dagster.yaml").read_text()
    runs = DagsterInstance.from_ref(InstanceRef.from_dir(str(home))).get_runs()
    jobs = sorted(r.job_name for r in runs)
    assert jobs == [
        "demo_catchup",
        "demo_checks",
        "demo_compaction",
        "demo_gc",
        "demo_merge",
        "demo_retention",
        "demo_snapshot",
    ]
    assert all(r.is_success for r in runs)
    gc_line = next(line for line in proc.stdout.splitlines() if line.startswith("gc "))
    assert "lsm_consistency=passed" in gc_line and "generations_deleted=" in gc_line
    # Merge and compaction are far below the Spark threshold: they ran in the run's process, the line
    # says why, and no Spark server was started for them.
    for job in ("merge ", "compaction "):
        line = next(line for line in proc.stdout.splitlines() if line.startswith(job))
        assert re.search(
            r" engine=local \([\d,]+ rows < spark_min_rows 500,000 and [\d.]+ MiB < spark_min_bytes", line
        )
    assert not warm_home(home).exists(), "the demo started a Spark server no run needed"
    # The closing hint is a `dg dev` command for where the demo ran: it serves the location there,
    # and the demo group's lineage shows every asset the runs materialized (the README's picture).
    hint = proc.stderr.splitlines()[-2].split()
    assert hint[:2] == [f"DAGSTER_HOME={home}", f"MEMWAL_TABLE_URI={tmp_path / 'demo' / 'table'}"], hint
    assert hint[3:] == ["dev", "-h", "127.0.0.1", "--target-path", os.path.relpath(PROJECT_ROOT, tmp_path)], (
        hint
    )
    (port,) = free_ports(1)
    log = tmp_path / "dg-dev.log"
    started = time.monotonic()
    with log.open("wb") as out:
        served = start_server(
            [hint[2], *hint[3:6], "-p", str(port), *hint[6:]],
            cwd=tmp_path,
            env={**env, **dict(word.split("=", 1) for word in hint[:2])},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://{LOOPBACK}:{port}"
        while not location_loaded(url):
            assert served.poll() is None, f"dg dev exited: {log.read_text()[-3000:]}"
            assert time.monotonic() - started < 180, (
                f"dg dev did not serve the location: {log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
        print(f"dg dev served the location {time.monotonic() - started:.1f} s after it started")
        shown = demo_lineage(url)
    finally:
        stop_process_group(served)
    assert shown.count("Materialized") == 6 and "100% filled" in shown, "every demo asset materialized"
    assert COMMUNITY_DIALOG not in shown, "Dagster's community dialog covers the lineage"
    keep_for_readme("asset-lineage.png")


def demo_lineage(url: str) -> str:
    """Take the picture of the demo group's lineage once every asset shows its latest run; the page's text."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{url}/locations/{LOCATION}/asset-groups/demo", wait_until="networkidle")
            page.wait_for_timeout(COMMUNITY_DIALOG_DELAY_MS)
            deadline = time.monotonic() + 60
            # Six assets materialized by a run each, base_table per region partition.
            while time.monotonic() < deadline:
                body = page.inner_text("body")
                if body.count("Materialized") == 6 and "100% filled" in body and "Loading" not in body:
                    break
                time.sleep(0.5)
            page.screenshot(path=str(ARTIFACTS / "asset-lineage.png"))
            text: str = page.inner_text("body")
            return text
        finally:
            browser.close()


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_ingest_job_loads_files_and_the_sensor_merges_them(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    import pyarrow.parquet as pq

    if engine == "spark":
        request.getfixturevalue("spark")  # the shared session: the resource's engine is built on it

    from tests.support.schema import make_table, model_of, source_rows

    uri = make_table(tmp_path / "t")
    rows = source_rows(5000)
    pq.write_table(rows, tmp_path / "src.parquet")
    keys = TableKeys(TableConfig(name="t", uri=uri))
    instance = DagsterInstance.ephemeral()
    definitions = build_definitions([keys.table])
    result = definitions.resolve_job_def("t_ingest").execute_in_process(
        instance=instance,
        run_config={
            "ops": {
                "t_ingest_files": {"config": {"sources": [str(tmp_path / "*.parquet")], "engine": engine}}
            }
        },
    )
    assert result.success
    output = result.output_for_node("t_ingest_files")
    assert output["rows_written"] == 5000 and len(output["regions"]) == 4 and output["engine"] == engine
    (request,) = tick(keys, instance, None).run_requests or []
    merged_run = run_job(keys, instance, "merge", tags=request.tags)
    assert sorted(e.partition for e in merged_run.get_asset_materialization_events()) == sorted(
        r["region"] for r in output["regions"]
    )
    with MemWalTable.open(uri) as opened:
        merged = {r["id"]: (r["name"], r["score"]) for r in opened.dataset().to_table().to_pylist()}
    assert merged == model_of(rows)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sources": ["none.parquet"]}, "none.parquet does not exist"),
        ({"sources": ["*.parquet"], "engine": "flink"}, "unknown engine 'flink' (use local or spark)"),
    ],
    ids=["missing-source", "unknown-engine"],
)
def test_ingest_job_refuses_bad_config_in_one_line(
    tmp_path: Path, config: dict[str, Any], message: str
) -> None:
    import pyarrow.parquet as pq

    from tests.support.schema import make_table, source_rows

    keys = TableKeys(TableConfig(name="t", uri=make_table(tmp_path / "t")))
    pq.write_table(source_rows(10), tmp_path / "src.parquet")
    sources = [str(tmp_path / source) for source in config["sources"]]
    result = (
        build_definitions([keys.table])
        .resolve_job_def("t_ingest")
        .execute_in_process(
            instance=DagsterInstance.ephemeral(),
            run_config={"ops": {"t_ingest_files": {"config": {**config, "sources": sources}}}},
            raise_on_error=False,
        )
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert message in str(failure.event_specific_data)


def test_a_merge_run_waiting_for_a_slot_holds_new_rounds_back_for_one_run_later(tmp_path: Path) -> None:
    """While a merge run waits for a run slot, a tick asks for no round (each would wait behind it);
    once that run has started, the next tick's run covers every table that flushed meanwhile."""
    tables = {f"t{i}": keyed_backlog_table(tmp_path / f"t{i}")[0] for i in range(3)}
    definitions = build_definitions(
        [TableConfig(name=n, uri=t.uri, merge_engine="local") for n, t in tables.items()]
    )
    instance = DagsterInstance.ephemeral()
    # NOT_STARTED stands for QUEUED (which Dagster makes only for a run from a code location).
    waiting = create_run_for_test(instance, job_name="t0_merge", status=DagsterRunStatus.NOT_STARTED)

    def tick(cursor: str | None) -> SensorResult:
        with build_sensor_context(
            instance=instance, cursor=cursor, resources=definitions.resources
        ) as context:
            result = definitions.resolve_sensor_def(FLUSHED_SENSOR)(context)
        assert isinstance(result, SensorResult)
        return result

    held = tick(None)
    assert not held.run_requests, "t1 and t2 wait for t0's queued run to start"
    instance.delete_run(waiting.run_id)  # it started: STARTED in its place
    create_run_for_test(instance, job_name="t0_merge", status=DagsterRunStatus.STARTED)
    (shared,) = tick(held.cursor).run_requests or []
    assert set(shared.tags["memwal/tables"].split(",")) >= {"t1", "t2"}, "one run for the tables held back"


def test_one_sensor_for_every_table_shares_runs_when_many_flush_at_once(tmp_path: Path) -> None:
    """The location's sensor: per-table rounds for a few tables, shared runs for many, a broken table skipped."""
    tables = {f"t{i}": keyed_backlog_table(tmp_path / f"t{i}")[0] for i in range(4)}
    configs = [TableConfig(name=n, uri=t.uri, merge_engine="local") for n, t in tables.items()]
    configs.append(TableConfig(name="paused", uri=keyed_backlog_table(tmp_path / "p")[0].uri, sensors=False))
    configs.append(TableConfig(name="gone", uri=str(tmp_path / "missing")))
    definitions = build_definitions(configs)
    instance = DagsterInstance.ephemeral()
    with build_sensor_context(instance=instance, resources=definitions.resources) as context:
        result = definitions.resolve_sensor_def(FLUSHED_SENSOR)(context)
    assert isinstance(result, SensorResult)
    shared = list(result.run_requests or [])
    assert {r.job_name for r in shared} == {"memwal_merge_tables"}
    assert [r.tags["memwal/tables"] for r in shared] == ["t0,t1,t2", "t3"], "the paused, the missing left out"
    assert set(json.loads(result.cursor or "{}")) == set(tables), "each table read keeps its own cursor"
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys or []))

    # Each table's round starts reading its regions from the manifest versions the tick read, as they
    # are while the tick's probes are recent (`polled_at`, per table).
    configs = [request.run_config["ops"]["merge_tables"]["config"] for request in shared]
    versions = [config["manifest_versions"] for config in configs]
    assert [sorted(v) for v in versions] == [["t0", "t1", "t2"], ["t3"]]
    assert all(len(regions) == 2 and min(regions.values()) >= 1 for v in versions for regions in v.values())
    assert all(sorted(c["polled_at"]) == sorted(c["manifest_versions"]) for c in configs)
    assert all(0 < at <= time.time() for c in configs for at in c["polled_at"].values())

    merged = set()
    for request in shared:
        run = definitions.resolve_job_def("memwal_merge_tables").execute_in_process(
            instance=instance, run_config=request.run_config, tags=request.tags
        )
        assert run.success
        merged |= {(e.asset_key.path[0], e.partition) for e in run.get_asset_materialization_events()}
    assert {name for name, _region in merged} == set(tables) and len(merged) == 8, "two regions per table"
    for table in tables.values():
        table.assert_merged()

    # Two tables with a round due: each its own merge run, as for one.
    for table in list(tables.values())[:2]:
        table.write(None, [("put", [{"id": 8000, "v": "again"}])])
    with build_sensor_context(
        instance=instance, cursor=result.cursor, resources=definitions.resources
    ) as context:
        again = definitions.resolve_sensor_def(FLUSHED_SENSOR)(context)
    assert isinstance(again, SensorResult)
    assert sorted(r.job_name for r in again.run_requests or []) == ["t0_merge", "t1_merge"]
    for added in again.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(added.partitions_def_name, list(added.partition_keys or []))
    for request in again.run_requests or []:
        run = definitions.resolve_job_def(request.job_name).execute_in_process(
            instance=instance, run_config=request.run_config, tags=request.tags
        )
        assert run.success
    for table in list(tables.values())[:2]:
        table.assert_merged()
