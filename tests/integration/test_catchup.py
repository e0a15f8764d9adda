"""Index catch-up: lag measured from Lance's own record, brought to zero, verified."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal_core.cli.main import main
from memwal_core.demo import write_demo_table
from memwal_core.errors import NotFoundError
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import CatchupResult, catchup, plan_catchup
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from tests.support.model import KEYED_SCHEMA, ModelTable
from tests.support.schema import key_field
from tests.support.tables import assert_progress_never_decreases, progress_history

SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("val", pa.int64()),
        pa.field("vec", pa.list_(pa.float32(), 4)),
    ]
)


def row(key: int, version: int) -> dict[str, object]:
    return {"id": key, "val": key * 10 + version, "vec": [float(key % 17), float(version), 1.0, 0.5]}


def make_table(uri: str, *, maintained: list[str] | None = None) -> dict[int, dict[str, object]]:
    """A scalar index made before MemWAL and a vector index made after; two regions of backlog.

    Returns the rows the table must hold once everything is merged.
    """
    rows = {k: row(k, 0) for k in range(300)}
    lance.write_dataset(pa.Table.from_pylist(list(rows.values()), schema=SCHEMA), uri)
    lance.dataset(uri).create_scalar_index("val", "BTREE", name="val_idx")
    lance.dataset(uri).initialize_mem_wal(maintained_indexes=maintained)
    lance.dataset(uri).create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=2, num_sub_vectors=2)
    for r in range(2):
        keys = [*range(r * 100, r * 100 + 15), *range(1000 + r * 100, 1000 + r * 100 + 10)]
        with lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=25) as writer:
            for g in (1, 2):
                batch = [row(k, g) for k in keys]
                writer.put(pa.Table.from_pylist(batch, schema=SCHEMA))
                rows.update({k: v for k, v in zip(keys, batch, strict=True)})
    return rows


def test_catchup_of_a_scalar_and_a_vector_index_made_after_init(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = make_table(uri)
    with MemWalTable.open(uri) as table:
        assert merge(table).failures == []
        details = table.index_details()
        plan = plan_catchup(table)
        assert [p.index for p in plan.indexes] == ["val_idx", "vec_idx"]
        assert all(p.behind for p in plan.indexes)

        result = catchup(table)

        after = table.index_details()
        assert after.table_version == result.new_version > details.table_version == result.read_version
        for r in result.indexes:
            assert r.method == "optimize"
            assert r.lag_before == details.merged and sorted(details.merged.values()) == [2, 2]
            assert r.lag_after == dict.fromkeys(details.merged, 0)
            assert after.index_catchup[r.index] == after.merged == details.merged
        # The caught-up indexes answer like a scan of the merged table.
        merged_rows = {r["id"]: r for r in table.dataset().to_table().to_pylist()}
        assert merged_rows == {k: {**v, "vec": pytest.approx(v["vec"])} for k, v in rows.items()}
        for probe in (rows[0], rows[1000], rows[150]):
            found = table.dataset().to_table(filter=f"val = {probe['val']}").column("id").to_pylist()
            assert found == [k for k, v in rows.items() if v["val"] == probe["val"]]
        assert catchup(table).new_version is None  # nothing to do: no commit


def test_catchup_of_one_named_index_and_rebuild(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    make_table(uri)
    with MemWalTable.open(uri) as table:
        merge(table)
        merged = table.index_details().merged
        result = catchup(table, indexes=["vec_idx"], rebuild=True)
        assert [(r.index, r.method) for r in result.indexes] == [("vec_idx", "rebuild")]
        details = table.index_details()
        assert details.index_catchup["vec_idx"] == merged
        assert details.index_catchup.get("val_idx", {}) != merged
        with pytest.raises(NotFoundError, match="no_such_idx"):
            catchup(table, indexes=["no_such_idx"])


def test_catchup_only_listed_indexes_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    make_table(uri, maintained=["val_idx"])
    with MemWalTable.open(uri) as table:
        merge(table)
        merged = table.index_details().merged
    assert main(["catchup", uri, "--json", "--dry-run"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["dry_run"] and planned["plan"]["indexes"] == {"val_idx": merged}
    assert planned["table_version"] == planned["planned_at_version"] == lance.dataset(uri).version
    assert main(["catchup", uri, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["index"] for r in payload["indexes"]] == ["val_idx"]
    assert payload["indexes"][0]["lag_after"] == dict.fromkeys(merged, 0)
    assert main(["catchup", uri, "--index", "vec_idx"]) == 2
    assert "vec_idx" in capsys.readouterr().err


def test_catchup_racing_merges_never_lowers_progress(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=200, regions=2, rounds=8, rows_per_generation=20)
    with MemWalTable.open(uri) as table:
        table.dataset().create_scalar_index("score", "BTREE", name="score_idx")
    stop = threading.Event()
    errors: list[BaseException] = []
    runs: list[CatchupResult] = []

    def catcher() -> None:
        with MemWalTable.open(uri) as table:
            while not stop.is_set():
                try:
                    runs.append(catchup(table))
                except BaseException as exc:
                    errors.append(exc)
                    return

    thread = threading.Thread(target=catcher)
    thread.start()
    try:
        with MemWalTable.open(uri) as table:
            while merge(table, max_generations=1).regions:
                pass
    finally:
        stop.set()
        thread.join(timeout=600)
    assert not errors, errors
    assert sum(r.new_version is not None for r in runs) >= 2
    assert_progress_never_decreases(progress_history(uri))
    with MemWalTable.open(uri) as table:
        catchup(table)
        details = table.index_details()
        assert details.index_catchup["score_idx"] == details.merged


def test_list_rewrites_racing_merges_never_lower_progress(tmp_path: Path) -> None:
    """Dropping and re-creating an index while merges run: every catch-up rewrites the list under the
    details lease, and no merge's progress is ever rolled back."""
    uri = str(tmp_path / "t")
    model = ModelTable(uri, KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(40)])
    lance.dataset(uri).create_scalar_index("v", "BTREE", name="v_idx")  # before the writes: they carry it
    for r in range(2):
        region = str(uuid.uuid4())
        for g in range(6):
            model.write(region, [("put", [{"id": r * 1000 + k, "v": f"g{g}"} for k in range(8)])])
    stop = threading.Event()
    errors: list[BaseException] = []
    rewrites: list[int] = []

    def toggler() -> None:
        with MemWalTable.open(uri) as table:
            while not stop.is_set():
                try:
                    table.dataset().drop_index("v_idx")
                    removed = catchup(table).maintained_list
                    table.dataset().create_scalar_index("v", "BTREE", name="v_idx")
                    added = catchup(table).maintained_list
                except BaseException as exc:
                    errors.append(exc)
                    return
                rewrites.extend(
                    change.table_version for change in (removed, added) if change and change.table_version
                )

    thread = threading.Thread(target=toggler)
    thread.start()
    try:
        with MemWalTable.open(uri) as table:
            while merge(table, max_generations=1).regions:
                time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=600)
    assert not errors, errors
    assert len(rewrites) >= 2, rewrites
    assert_progress_never_decreases(progress_history(uri))
    with MemWalTable.open(uri) as table:
        catchup(table)
        assert status(table).pending_total == 0
        assert table.index_details().maintained_indexes == ("v_idx",)
    model.assert_merged()
