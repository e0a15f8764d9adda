"""LanceDB (its own Lance inside) on tables memwal maintains: same rows as pylance, vector search works.

LanceDB 0.40 routes reads of a MemWAL table through its LSM scanner (base
table plus the flushed generations not yet merged), and its vector search
refuses a vector index that the MemWAL details do not list as maintained. So
after every memwal step its read must equal pylance's LSM read and the plain
model of what was written, its base-table read must equal pylance's, and a
query equal to a row's vector must find that row first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memwal_core.cli.main import main
from memwal_core.model.table import MemWalTable
from memwal_core.services.writer import MemWalWriter
from tests.support.tables import lsm_rows_at

DIM = 8
VECTOR = pa.list_(pa.float32(), DIM)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("vec", VECTOR),
        pa.field("vec2", VECTOR),
    ]
)
# Two IVF partitions, both probed: the indexed part of a search is exact.
PARTITIONS = 2
UNMAINTAINED = "maintained by the write spec"

Model = dict[int, dict[str, Any]]


def random_rows(rng: np.random.Generator, keys: list[int]) -> list[dict[str, Any]]:
    """Rows with random vectors in [0, 1): distinct enough that every row is its own nearest."""
    vectors = rng.random((len(keys), 2, DIM), dtype=np.float32)
    return [
        {"id": k, "vec": v[0].tolist(), "vec2": v[1].tolist()} for k, v in zip(keys, vectors, strict=True)
    ]


def make_table(db: Path, rng: np.random.Generator) -> tuple[str, Model]:
    """200 base rows in four fragments, an IVF_FLAT index on `vec` (none on `vec2`)."""
    uri = str(db / "t.lance")
    rows = random_rows(rng, list(range(200)))
    lance.write_dataset(pa.Table.from_pylist(rows, schema=SCHEMA), uri, max_rows_per_file=50)
    lance.dataset(uri).create_index("vec", "IVF_FLAT", name="vec_idx", num_partitions=PARTITIONS)
    return uri, {r["id"]: r for r in rows}


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """Run a memwal command with --json; it must succeed."""
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, f"memwal {' '.join(args)} exited {code}: {out}"
    payload: dict[str, Any] = json.loads(out)
    return payload


def ingest(capsys: pytest.CaptureFixture[str], uri: str, path: Path, rows: list[dict[str, Any]]) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    cli_json(capsys, "ingest", uri, str(path))


def keyed(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Rows by key, vectors as float32 tuples (both readers return float32)."""
    out: dict[int, tuple[Any, ...]] = {}
    for r in rows:
        assert r["id"] not in out, f"key {r['id']} read twice"
        out[r["id"]] = tuple(tuple(np.float32(x) for x in r[c]) for c in ("vec", "vec2"))
    return out


def open_lancedb(uri: str) -> Any:
    path = Path(uri)
    return lancedb.connect(str(path.parent)).open_table(path.name.removesuffix(".lance"))


def search(table: Any, query: Any, column: str = "vec", k: int = 1) -> list[dict[str, Any]]:
    builder = table.search(np.asarray(query, dtype=np.float32), vector_column_name=column)
    result: list[dict[str, Any]] = builder.nprobes(PARTITIONS).limit(k).to_arrow().to_pylist()
    return result


def assert_lancedb_agrees(
    uri: str, model: Model, probes: list[int], stale: dict[int, list[float]], column: str = "vec"
) -> None:
    """LanceDB reads what pylance reads and what was written, and its vector search finds each probe.

    `stale`: vectors keys no longer hold (overwritten or deleted): a search for one must not
    return that key with its old vector.
    """
    table = open_lancedb(uri)
    dataset = lance.dataset(uri)
    expected = keyed(list(model.values()))
    assert keyed(table.to_arrow().to_pylist()) == expected
    assert keyed(lsm_rows_at(uri, dataset.version, ["id", "vec", "vec2"])) == expected
    base = table.search().use_lsm(False).limit(None).to_arrow().to_pylist()
    assert keyed(base) == keyed(dataset.to_table().to_pylist())
    for key in probes:
        found = search(table, model[key][column], column)
        assert [r["id"] for r in found] == [key], f"search for the vector of {key} found {found}"
    for key, vector in stale.items():
        for r in search(table, vector, column, k=3):
            assert r["id"] in model and np.allclose(r[column], model[r["id"]][column]), (
                f"search for the old vector of {key} returned a stale row {r['id']}"
            )


def test_lancedb_reads_and_searches_after_every_memwal_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(7)
    db = tmp_path / "db"
    uri, model = make_table(db, rng)
    probes = [5, 150]

    init = cli_json(capsys, "init", uri, "--primary-key", "id", "--bucket", "id", "--num-buckets", "2")
    assert init["maintained_indexes"] == ["vec_idx"]
    assert init["region_spec"]["maintain_all_indexes"] is True  # Lance 14 still maintains later indexes
    assert_lancedb_agrees(uri, model, probes, {})

    # ingest: new keys and overwrites through MemWalWriter, then deletes, each flushed as generations
    written = random_rows(rng, [*range(1000, 1060), *range(0, 20)])
    stale = {r["id"]: model[r["id"]]["vec"] for r in written if r["id"] in model}
    ingest(capsys, uri, tmp_path / "part.parquet", written)
    model.update({r["id"]: r for r in written})
    with MemWalWriter(uri, durable_write=True) as writer:
        writer.delete([30, 31, 1001])
    for key in (30, 31, 1001):
        stale[key] = model.pop(key)["vec"]
    probes += [1000, 1059, 3]
    with MemWalTable.open(uri) as table:
        assert table.index_details().merged == {}  # everything written is still pending
    assert_lancedb_agrees(uri, model, probes, stale)

    merged = cli_json(capsys, "merge", uri)
    assert merged["failures"] == [] and merged["regions"]
    assert_lancedb_agrees(uri, model, probes, stale)

    caught_up = cli_json(capsys, "catchup", uri)
    assert [(r["index"], max(r["lag_after"].values())) for r in caught_up["indexes"]] == [("vec_idx", 0)]
    assert caught_up["maintained_list"]["added"] == []  # init already listed it
    assert_lancedb_agrees(uri, model, probes, stale)

    cli_json(capsys, "snapshot", uri)
    assert_lancedb_agrees(uri, model, probes, stale)

    compacted = cli_json(capsys, "compact", uri, "--target-rows", "100000")
    assert compacted["fragments_after"] < compacted["fragments_before"]
    assert_lancedb_agrees(uri, model, probes, stale)

    retained = cli_json(capsys, "retain", uri, "--older-than", "0s", "--force")
    assert retained["removed_versions"]
    assert_lancedb_agrees(uri, model, probes, stale)

    collected = cli_json(capsys, "gc", uri, "--grace-seconds", "0")
    assert collected["deleted"], "GC deleted no generation: the last step read nothing new"
    assert_lancedb_agrees(uri, model, probes, stale)
    assert lance.dataset(uri).mem_wal_index_details()["maintained_indexes"] == ["vec_idx"]


def test_index_created_after_init_is_listed_once_it_covers_every_generation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(11)
    db = tmp_path / "db"
    uri, model = make_table(db, rng)
    cli_json(capsys, "init", uri, "--primary-key", "id", "--bucket", "id", "--num-buckets", "2")
    before = random_rows(rng, list(range(1000, 1040)))
    with MemWalWriter(uri, durable_write=True) as writer:
        writer.put(pa.Table.from_pylist(before, schema=SCHEMA))
    model.update({r["id"]: r for r in before})

    lance.dataset(uri).create_index("vec2", "IVF_FLAT", name="vec2_idx", num_partitions=PARTITIONS)
    with pytest.raises(Exception, match=UNMAINTAINED):  # LanceDB refuses an index the details do not list
        search(open_lancedb(uri), model[7]["vec2"], "vec2")

    # The generations flushed before the index have no copy of it: listing it now would make
    # LanceDB's search leave their rows out silently, so catch-up waits for them to be merged.
    waiting = cli_json(capsys, "catchup", uri)["maintained_list"]
    assert waiting["added"] == [] and waiting["table_version"] is None
    assert sorted(g["generation"] for g in waiting["waiting"]["vec2_idx"]) == [1, 1]
    assert lance.dataset(uri).mem_wal_index_details()["maintained_indexes"] == ["vec_idx"]
    with pytest.raises(Exception, match=UNMAINTAINED):
        search(open_lancedb(uri), model[1003]["vec2"], "vec2")

    cli_json(capsys, "merge", uri)
    planned = cli_json(capsys, "catchup", uri, "--dry-run")["maintained_list"]
    assert planned["table_version"] is None and "vec2_idx" in planned["waiting"]  # not caught up yet
    done = cli_json(capsys, "catchup", uri)
    assert done["maintained_list"]["added"] == ["vec2_idx"] and done["maintained_list"]["waiting"] == {}
    assert done["maintained_list"]["table_version"] == done["table_version"] == lance.dataset(uri).version
    details = lance.dataset(uri).mem_wal_index_details()
    assert details["maintained_indexes"] == ["vec2_idx", "vec_idx"] and details["maintain_all_indexes"]
    for column in ("vec", "vec2"):
        assert_lancedb_agrees(uri, model, [7, 1003], {}, column)

    # Writers opened from now on carry both indexes: their pending rows are found before any merge.
    after = random_rows(rng, [*range(2000, 2030), 7])
    stale = {7: model[7]["vec2"]}
    with MemWalWriter(uri, durable_write=True) as writer:
        writer.put(pa.Table.from_pylist(after, schema=SCHEMA))
    model.update({r["id"]: r for r in after})
    for column in ("vec", "vec2"):
        assert_lancedb_agrees(uri, model, [7, 2005, 1003], stale if column == "vec2" else {}, column)

    # A dropped index leaves the list at the next catch-up; search through the other one still works.
    lance.dataset(uri).drop_index("vec2_idx")
    dropped = cli_json(capsys, "catchup", uri)
    assert dropped["maintained_list"]["removed"] == ["vec2_idx"]
    assert lance.dataset(uri).mem_wal_index_details()["maintained_indexes"] == ["vec_idx"]
    assert_lancedb_agrees(uri, model, [7, 2005], {})
