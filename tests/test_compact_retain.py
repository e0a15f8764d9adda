"""Base-table upkeep: compaction (local, Spark, a standalone cluster, racing merges) and retention."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.catchup import catchup
from memwal_core.services.compact import SparkCompactionEngine, compact
from memwal_core.services.merge.service import merge
from memwal_core.services.retain import parse_duration, retain
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.snapshot.stored import read_stored_snapshot
from memwal_core.table import MemWalTable
from tests.support.model import ModelTable
from tests.support.tables import assert_progress_never_decreases, progress_history

ROOT = Path(__file__).resolve().parent.parent
PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata=PK),
        pa.field("v", pa.string()),
        pa.field("vec", pa.list_(pa.float32(), 4)),
    ]
)


def row(key: int, label: str) -> dict[str, Any]:
    rng = np.random.default_rng(key)
    return {"id": key, "v": label, "vec": rng.random(4, dtype=np.float32).tolist()}


def fragmented_table(path: Path, merges: int = 8) -> tuple[ModelTable, str]:
    """600 base rows with a BTree and a vector index, then `merges` one-generation merges."""
    table = ModelTable(path, SCHEMA, ["id"], [row(i, "base") for i in range(600)])
    table.dataset().create_scalar_index("id", "BTREE")
    table.dataset().create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    region = str(uuid.uuid4())
    for g in range(merges):
        updates = [row(k, f"g{g}") for k in range(g * 20, g * 20 + 10)]
        fresh = [row(10_000 + g * 10 + k, f"new{g}") for k in range(5)]
        table.write(region, [("put", updates + fresh), ("delete", [{"id": 500 + g}])], memtable_rows=50)
        with MemWalTable.open(table.uri) as opened:
            assert not merge(opened).failures
    return table, region


def assert_indexes_answer(table: ModelTable) -> None:
    dataset = table.dataset()
    scan = dataset.scanner(filter="id = 25", columns=["id", "v"])
    assert "ScalarIndexQuery" in scan.explain_plan()
    assert scan.to_table().to_pylist() == [{"id": 25, "v": table.rows[(25,)]["v"]}]
    probe = table.rows[(599,)]["vec"]
    nearest = dataset.to_table(nearest={"column": "vec", "q": probe, "k": 3}, columns=["id"])
    assert 599 in nearest.column("id").to_pylist()


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_compaction_keeps_rows_progress_catchup_and_indexes(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    table, region = fragmented_table(tmp_path / "t")
    with MemWalTable.open(table.uri) as opened:
        catchup(opened)
        before = opened.index_details()
        assert before.index_catchup, "catch-up recorded the indexes as caught up"
        fragments = len(opened.dataset().get_fragments())
        chosen = SparkCompactionEngine(request.getfixturevalue("spark")) if engine == "spark" else None
        result = compact(opened, engine=chosen, target_rows_per_fragment=10_000)
        after = opened.index_details()
    assert fragments > 4 and result.fragments_before == fragments
    assert result.fragments_after < fragments and result.fragments_after <= 2
    assert result.rows_rewritten > 0 and result.engine == engine
    assert after.merged == before.merged == {region: 8}
    assert after.index_catchup == before.index_catchup
    table.assert_merged()
    assert_indexes_answer(table)


def test_compaction_on_a_standalone_cluster_through_the_cli(standalone_spark: Any, tmp_path: Path) -> None:
    table, _region = fragmented_table(tmp_path / "t", merges=4)
    before = len(table.dataset().get_fragments())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memwal_core.cli.main",
            "compact",
            "t",
            "--engine",
            "spark",
            "--spark-master",
            standalone_spark.master_url,
            "--target-rows",
            "10000",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(proc.stdout)
    assert payload["engine"] == "spark" and payload["tasks"] >= 1
    assert payload["fragments_before"] == before and payload["fragments_after"] < before
    table.assert_merged()
    assert_indexes_answer(table)


def test_compaction_racing_a_merge_loop_both_progress(tmp_path: Path) -> None:
    table = ModelTable(tmp_path / "t", SCHEMA, ["id"], [row(i, "base") for i in range(400)])
    region = str(uuid.uuid4())
    stop = time.monotonic() + 25
    merges: list[int] = []
    compactions: list[int] = []
    errors: list[BaseException] = []

    def merge_loop() -> None:
        try:
            g = 0
            while time.monotonic() < stop:
                g += 1
                puts = [row(k % 400, f"m{g}") for k in range(g * 7, g * 7 + 30)] + [row(1000 + g, "new")]
                table.write(region, [("put", puts), ("delete", [{"id": (g * 13) % 400}])], memtable_rows=100)
                with MemWalTable.open(table.uri) as opened:
                    result = merge(opened, lease_wait=60)
                assert not result.failures, result.failures
                merges.extend(len(r.merged_generations) for r in result.regions)
        except BaseException as exc:
            errors.append(exc)

    def compaction_loop() -> None:
        try:
            while time.monotonic() < stop:
                with MemWalTable.open(table.uri) as opened:
                    result = compact(opened, target_rows_per_fragment=100_000, lease_wait=60)
                if result.fragments_removed:
                    compactions.append(result.fragments_removed)
                time.sleep(0.2)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=merge_loop), threading.Thread(target=compaction_loop)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    print(f"merge commits {len(merges)}, compaction commits {len(compactions)}")
    assert len(merges) >= 5, f"merges starved: {len(merges)} merge commits"
    assert len(compactions) >= 3, f"compaction starved: {len(compactions)} compaction commits"
    with MemWalTable.open(table.uri) as opened:
        assert not merge(opened).failures
    table.assert_merged()
    assert_progress_never_decreases(progress_history(table.uri))


def test_retention_floor_tags_and_removed_versions(tmp_path: Path) -> None:
    table, _region = fragmented_table(tmp_path / "t", merges=4)
    dataset = table.dataset()
    versions = [v["version"] for v in dataset.versions()]
    dataset.tags.create("audit", versions[2])
    with MemWalTable.open(table.uri) as opened:
        with pytest.raises(BadInputError, match="younger than 1:00:00"):
            retain(opened, older_than=parse_duration("30m"))
        assert [v["version"] for v in opened.dataset().versions()] == versions, "a refusal removes nothing"
        result = retain(opened, older_than=timedelta(0), keep_versions=2, force=True)
    remaining = [v["version"] for v in table.dataset().versions()]
    assert remaining == sorted({versions[2], *versions[-2:]})
    assert result.removed_versions == sorted(set(versions) - set(remaining))
    assert result.oldest_retained == versions[2] and result.tagged_versions == [versions[2]]
    assert table.dataset().checkout_version(versions[2]).count_rows() > 0, "the tagged version still reads"
    table.assert_merged()


def test_retention_rebuilds_a_snapshot_file_cleanup_removed(tmp_path: Path) -> None:
    table, _region = fragmented_table(tmp_path / "t", merges=2)
    with MemWalTable.open(table.uri) as opened:
        assert build_snapshot(opened, inline_threshold=0).storage == "file"
        table.write(None, [("put", [row(20_000, "late")])])
        assert not merge(opened).failures  # a later version: the snapshot's own version becomes old
        result = retain(opened, older_than=timedelta(0), keep_versions=1, force=True)
        assert result.snapshot_rebuilt
        assert read_stored_snapshot(opened, opened.index_details()).rows


def test_cli_bad_durations_exit_2(tmp_path: Path) -> None:
    table, _region = fragmented_table(tmp_path / "t", merges=1)
    for args in (
        ["--older-than", "5x"],
        ["--older-than", "10m"],
        ["--older-than", "2h", "--keep-versions", "0"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "memwal_core.cli.main", "retain", table.uri, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "memwal retain: error:" in proc.stderr
