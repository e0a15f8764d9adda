"""Base-table upkeep: compaction (local, Spark, a standalone cluster, racing merges) and retention."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from memwal_core.errors import BadInputError
from memwal_core.format.index_details import IndexDetails
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.compact import compact
from memwal_core.services.engine import LocalEngine
from memwal_core.services.gc.rules import RETAINED_VERSION, GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.service import merge
from memwal_core.services.retain import parse_duration, retain
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.snapshot.stored import read_stored_snapshot
from tests.support.engines import engine_called
from tests.support.model import ModelTable
from tests.support.paths import PROJECT_ROOT
from tests.support.schema import PRIMARY_KEY
from tests.support.tables import assert_progress_never_decreases, progress_history

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata=PRIMARY_KEY),
        pa.field("v", pa.string()),
        pa.field("vec", pa.list_(pa.float32(), 4)),
    ]
)
# Small enough that the compacted table still has several fragments, so the count is telling.
TARGET_ROWS = 256


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


def caught_up_before_compaction(table: ModelTable) -> tuple[IndexDetails, int]:
    """Catch the indexes up, then record the details and fragment count compaction must respect."""
    with MemWalTable.open(table.uri) as opened:
        catchup(opened)
        details = opened.index_details()
        fragments = len(opened.dataset().get_fragments())
    assert details.index_catchup, "catch-up recorded the indexes as caught up"
    assert fragments > 4, "the merges left many small fragments"
    return details, fragments


def assert_compacted(table: ModelTable, before: IndexDetails, fragments_after: int) -> None:
    """Fragments down to the target, rows equal to the model, progress, catch-up and indexes kept."""
    with MemWalTable.open(table.uri) as opened:
        after = opened.index_details()
        sizes = [f.count_rows() for f in opened.dataset().get_fragments()]
    # Lance spreads the rows evenly over rows // target fragments: none is a runt, none twice the target.
    assert len(sizes) == fragments_after > 1
    assert all(TARGET_ROWS <= n < 2 * TARGET_ROWS for n in sizes), f"fragment sizes {sizes}"
    assert after.merged == before.merged and sum(after.merged.values()) > 0
    assert after.index_catchup == before.index_catchup
    table.assert_merged()
    assert_indexes_answer(table)


@pytest.mark.parametrize("engine", ["local", "spark", "connect"])
def test_compaction_keeps_rows_progress_catchup_and_indexes(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _region = fragmented_table(tmp_path / "t")
    before, fragments = caught_up_before_compaction(table)
    chosen = engine_called(engine, request, monkeypatch, rows_per_task=1)
    with MemWalTable.open(table.uri) as opened:
        result = compact(opened, engine=chosen, target_rows_per_fragment=TARGET_ROWS)
    assert result.fragments_before == fragments and result.fragments_removed == fragments
    assert result.rows_rewritten == len(table.rows) and result.engine == chosen.name
    assert_compacted(table, before, result.fragments_after)


class _DeleteDuringTheRewrite(LocalEngine):
    """This process's threads, and, while the first rewrite runs, another client of the table deleting a
    row: a commit that takes no memwal lease, on the fragments being rewritten."""

    def __init__(self, uri: str, key: int) -> None:
        super().__init__()
        self.uri, self.key, self.runs = uri, key, 0

    def run(self, task: Any, items: Any, *, what: str, waiting: int | None = None) -> Any:
        self.runs += 1
        done = super().run(task, items, what=what, waiting=waiting)
        if self.runs == 1:
            lance.dataset(self.uri).delete(f"id = {self.key}")
        return done


def test_a_rewrite_preempted_by_another_clients_commit_is_planned_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lance refuses a rewrite that a newer commit on the same fragments preempted ("Retryable commit
    conflict"): compaction plans it again on that commit's version, and both hold."""
    table, _region = fragmented_table(tmp_path / "t")
    before, _fragments = caught_up_before_compaction(table)
    engine = _DeleteDuringTheRewrite(table.uri, key=3)
    with caplog.at_level(logging.WARNING), MemWalTable.open(table.uri) as opened:
        result = compact(opened, engine=engine, target_rows_per_fragment=TARGET_ROWS)
    assert engine.runs == 2, "the rewrite was planned and run again"
    assert "Retryable commit conflict" in caplog.text and "planning it again (attempt 2)" in caplog.text
    table.rows.pop(table.key({"id": 3}))  # the other client's delete holds
    assert_compacted(table, before, result.fragments_after)


def test_compaction_on_a_standalone_cluster_through_the_cli(standalone_spark: Any, tmp_path: Path) -> None:
    table, _region = fragmented_table(tmp_path / "t")
    before, fragments = caught_up_before_compaction(table)
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
            str(TARGET_ROWS),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(proc.stdout)
    assert payload["engine"] == "spark" and payload["tasks"] >= 1
    assert payload["fragments_before"] == fragments
    assert_compacted(table, before, payload["fragments_after"])


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
        # Every generation the loop merged is still recorded as merged, and nothing is left over.
        assert opened.index_details().merged == {region: sum(merges)}, "merge progress was lost"
        final = merge(opened)
        assert not final.failures and final.generations_merged == 0
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
    assert result.removed == sorted(set(versions) - set(remaining))
    assert result.oldest_retained_version == versions[2] and result.tagged_versions == [versions[2]]
    assert table.dataset().checkout_version(versions[2]).count_rows() > 0, "the tagged version still reads"
    table.assert_merged()


def test_retention_lets_gc_free_generations_only_old_versions_held(tmp_path: Path) -> None:
    """Old versions with lower progress keep merged generations; retention releases all but the tagged one's."""
    table = ModelTable(tmp_path / "t", SCHEMA, ["id"], [row(i, "base") for i in range(20)])
    table.write(None, [("put", [row(100 + k, "new") for k in range(30)])], memtable_rows=10)
    with MemWalTable.open(table.uri) as opened:
        for _ in range(3):  # one version per merged generation: progress 1, 2, 3
            assert merge(opened, max_generations=1).generations_merged == 1
    dataset = table.dataset()
    dataset.tags.create("audit", dataset.version - 2)  # merged only generation 1
    policy = GcPolicy(grace_seconds=0)

    def collect() -> tuple[list[int], dict[int, str]]:
        with MemWalTable.open(table.uri) as opened:
            payload = gc(opened, dry_run=False, policy=policy).to_json()
        return sorted(d["generation"] for d in payload["deleted"]), {
            k["generation"]: k["reason"] for k in payload["kept"]
        }

    assert collect() == ([], {g: RETAINED_VERSION for g in (1, 2, 3)}), "version 1 merged nothing"
    with MemWalTable.open(table.uri) as opened:
        retain(opened, older_than=timedelta(0), keep_versions=1, force=True)
    assert collect() == ([1], {2: RETAINED_VERSION, 3: RETAINED_VERSION}), "the tag holds 2 and 3"
    table.dataset().tags.delete("audit")
    with MemWalTable.open(table.uri) as opened:
        retain(opened, older_than=timedelta(0), keep_versions=1, force=True)
    assert collect() == ([2, 3], {})
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
            cwd=PROJECT_ROOT,
            timeout=120,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "memwal retain: error:" in proc.stderr
