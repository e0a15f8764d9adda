"""The ordered merge, checked against Lance's own reads and a plain Python model."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from tests.support.engines import merge_engine
from tests.support.model import ModelTable
from tests.support.schema import PRIMARY_KEY
from tests.support.tables import progress


@pytest.fixture(params=["local", "spark"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    return merge_engine(request, monkeypatch, rows_per_task=16)


def test_demo_backlog_merges_to_the_model(tmp_path: Path, engine: Engine) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=500, regions=3, rounds=3, rows_per_generation=50)
    with MemWalTable.open(uri) as table:
        result = merge(table, engine=engine)
        assert not result.failures
        after = status(table)
    assert after.pending_total == 0
    for region in after.regions:
        assert region.merged_generation == region.flushed_generations[-1]
    rows = {r["id"]: (r["name"], r["score"]) for r in MemWalTable(uri).dataset().to_table().to_pylist()}
    assert rows == log.model()
    assert not MemWalTable(uri).store.list_files(STAGING_DIR), "staged collapse output is left behind"
    assert sum(len(r.merged_generations) for r in result.regions) == sum(
        len(r.flushed_generations) for r in after.regions
    )


def test_merging_in_chunks_keeps_order_and_progress(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=300, regions=2, rounds=4, rows_per_generation=30)
    seen: dict[str, list[int]] = {r: [] for r in log.regions}
    for chunk in [1, 2, 1, 3, 100]:
        with MemWalTable.open(uri) as table:
            before = progress(uri)
            result = merge(table, max_generations=chunk)
            for r in result.regions:
                assert r.merged_generations == list(
                    range(before[r.region] + 1, before[r.region] + 1 + len(r.merged_generations))
                )
                assert len(r.merged_generations) <= chunk
                seen[r.region].extend(r.merged_generations)
            after = progress(uri)
            assert all(after[k] >= before[k] for k in before)
            for r in result.regions:
                assert after[r.region] == r.merged_generations[-1]
    for region, generations in seen.items():
        assert generations == list(range(1, len(generations) + 1)), region
    rows = {r["id"]: (r["name"], r["score"]) for r in MemWalTable(uri).dataset().to_table().to_pylist()}
    assert rows == log.model()


def test_deletes_reinserts_and_repeated_updates(tmp_path: Path, engine: Engine) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False, metadata=PRIMARY_KEY), pa.field("v", pa.string())])
    table = ModelTable(tmp_path / "t", schema, ["id"], [{"id": i, "v": f"base{i}"} for i in range(100)])
    region = table.write(
        None,
        [
            ("delete", [{"id": 1}, {"id": 2}, {"id": 3}]),  # keys only in the base table
            ("put", [{"id": 1000, "v": "new"}]),
            ("put", [{"id": 7, "v": "g-a"}]),
        ],
        memtable_rows=3,
    )
    table.write(
        region,
        [
            ("put", [{"id": 2, "v": "re-inserted"}]),  # deleted in an earlier generation
            ("delete", [{"id": 1000}]),
            ("put", [{"id": 7, "v": "g-b"}]),
            ("put", [{"id": 7, "v": "g-c"}]),
            ("delete", [{"id": 50}]),
            ("put", [{"id": 50, "v": "back"}]),
        ],
        memtable_rows=1,
    )
    with MemWalTable.open(table.uri) as opened:
        flushed = status(opened).regions[0].flushed_generations
        assert len(flushed) >= 6
        # The first merge takes a prefix that ends between a delete and its re-insert.
        result = merge(opened, max_generations=2, engine=engine)
        assert not result.failures
        result = merge(opened, engine=engine)
        assert not result.failures
    table.assert_merged()
    assert table.actual()[(2,)]["v"] == "re-inserted"
    assert (1,) not in table.actual() and (1000,) not in table.actual()
    assert table.actual()[(7,)]["v"] == "g-c"


VECTOR = pa.list_(pa.float32(), 4)


@pytest.mark.parametrize(
    "key_fields",
    [
        [pa.field("k", pa.string(), False, metadata=PRIMARY_KEY)],
        [
            pa.field(
                "a",
                pa.int32(),
                False,
                metadata={**PRIMARY_KEY, "lance-schema:unenforced-primary-key:position": "1"},
            ),
            pa.field(
                "b",
                pa.string(),
                False,
                metadata={**PRIMARY_KEY, "lance-schema:unenforced-primary-key:position": "2"},
            ),
        ],
    ],
    ids=["string-key", "composite-key"],
)
def test_payload_types_and_key_kinds(tmp_path: Path, engine: Engine, key_fields: list[pa.Field]) -> None:
    schema = pa.schema(
        [
            *key_fields,
            pa.field("text", pa.string()),
            pa.field("maybe", pa.int64(), True),
            pa.field("vec", VECTOR),
        ]
    )
    names = [f.name for f in key_fields]

    def row(i: int, tag: str) -> dict[str, Any]:
        key: dict[str, Any] = {"k": f"key'{i}"} if names == ["k"] else {"a": i % 7, "b": f"b'{i}"}
        return {
            **key,
            "text": f"{tag}-{i}",
            "maybe": None if i % 3 == 0 else i,
            "vec": [float(i), 1.0, 2.0, float(tag == "new")],
        }

    table = ModelTable(tmp_path / "t", schema, names, [row(i, "base") for i in range(40)])
    region = table.write(
        None,
        [("put", [row(i, "new") for i in range(30, 60)]), ("delete", [row(i, "x") for i in range(0, 10)])],
        memtable_rows=15,
    )
    table.write(
        region, [("put", [row(i, "newer") for i in range(5, 8)]), ("delete", [row(35, "x")])], memtable_rows=2
    )
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, engine=engine)
    assert not result.failures, result.failures
    table.assert_merged()


def test_missing_generation_directory_stops_only_its_region(tmp_path: Path, engine: Engine) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=200, regions=2, rounds=2, rows_per_generation=20)
    broken, healthy = sorted(log.regions)
    with MemWalTable.open(uri) as table:
        manifest = table.region_store(broken).read_latest()
        shutil.rmtree(tmp_path / "t" / "_mem_wal" / broken / manifest.generations[1].path)
        result = merge(table, engine=engine)
        after = progress(uri)
    assert [f.region for f in result.failures] == [broken]
    assert result.failures[0].exit_code == 2, "a missing generation directory is bad input"
    assert f"generation {manifest.generations[1].generation}" in result.failures[0].error
    assert after[broken] == 0, "nothing of the broken region may be merged past the missing generation"
    assert after[healthy] > 0


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=100, regions=2, rounds=2, rows_per_generation=20)
    with MemWalTable.open(uri) as table:
        version = table.dataset().version
        result = merge(table, dry_run=True)
        assert result.plan is not None and result.plan.regions
        assert not result.regions
        assert table.dataset().version == version


def test_nothing_to_merge_is_success(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        merge(table)
        again = merge(table)
    assert not again.regions and not again.failures
