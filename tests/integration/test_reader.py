"""The MemWAL-aware reader equals the model at every stage of partial merges."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal_core.demo import write_demo_table
from memwal_core.errors import CorruptMetadataError, NotFoundError
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.merge.service import merge
from memwal_core.services.reader import ReadPlan, lsm_scanner, plan_read, point_lookup
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status

Rows = dict[int, tuple[str, float]]


def scanned(table: MemWalTable, plan: ReadPlan, where: str | None = None) -> Rows:
    scanner = lsm_scanner(table, plan).project(["id", "name", "score"])
    if where is not None:
        scanner = scanner.filter(where)
    rows = scanner.to_table().to_pylist()
    keyed = {r["id"]: (r["name"], r["score"]) for r in rows}
    assert len(keyed) == len(rows), "a key came back twice"
    return keyed


def looked_up(table: MemWalTable, plan: ReadPlan, key: int) -> tuple[str, float] | None:
    rows = (
        point_lookup(table, plan).plan_lookup(pa.array([key], pa.int64()), ["id", "name", "score"]).to_table()
    )
    assert rows.num_rows <= 1
    return (rows.column("name")[0].as_py(), rows.column("score")[0].as_py()) if rows.num_rows else None


def assert_reads_equal_model(table: MemWalTable, plan: ReadPlan, model: Rows, probes: list[int]) -> None:
    assert scanned(table, plan) == model
    for key in probes:
        assert looked_up(table, plan, key) == model.get(key), key


@pytest.mark.parametrize("lagging_index", [False, True])
def test_reader_equals_model_at_every_merge_stage(tmp_path: Path, lagging_index: bool) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=60, regions=2, rounds=3, rows_per_generation=10)
    model = log.model()
    deleted = sorted(set(log.base) - set(model))
    probes = [min(model), max(model), *deleted[:2]]
    with MemWalTable.open(uri) as table:
        if lagging_index:
            table.dataset().create_scalar_index("name", "BTREE", name="name_idx")
        index = "name_idx" if lagging_index else None
        build_snapshot(table)  # before any merge: the stored snapshot lists every generation
        stages = 0
        while True:
            plan = plan_read(table, index=index)
            details = table.index_details(plan.table_version)
            for r in plan.regions:
                merged = details.merged_generation(r.region)
                # Merged generations are skipped, except those the index has not caught up with.
                expected = (
                    min(merged, details.index_catchup.get("name_idx", {}).get(r.region, 0))
                    if index
                    else merged
                )
                assert r.base_holds_through == expected
                assert all(g > expected for g, _p in r.generations)
            assert_reads_equal_model(table, plan, model, probes)
            assert_reads_equal_model(table, plan_read(table, index=index, from_snapshot=True), model, probes)
            if index is not None:
                name = model[probes[0]][0]
                assert scanned(table, plan, f"name = '{name}'") == {
                    k: v for k, v in model.items() if v[0] == name
                }
            if status(table).pending_total == 0:
                break
            assert merge(table, max_generations=1).failures == []
            stages += 1
        assert stages >= 3
        if lagging_index:
            # The index lagged behind the merges the whole time; once caught up, nothing merged is read.
            assert any(r.generations for r in plan_read(table, index=index).regions)
            catchup(table)
            assert not any(r.generations for r in plan_read(table, index=index).regions)
            assert_reads_equal_model(table, plan_read(table, index=index), model, probes)
        with pytest.raises(NotFoundError, match="no_such_idx"):
            plan_read(table, index="no_such_idx")


def test_reader_refuses_a_table_without_primary_key(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri).initialize_mem_wal()
    with MemWalTable.open(uri) as table, pytest.raises(CorruptMetadataError, match="no primary key"):
        plan_read(table)
