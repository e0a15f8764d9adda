"""Tables whose schema changes under pending generations: the merge follows Lance's schema evolution.

Each case writes generations in two regions under the old schema (puts,
updates, deletes), changes the base table with Lance (a nullable column
added, a column renamed, a column dropped), writes more through a
`MemWalWriter` opened after the change (the new schema), then checks the
MemWAL-aware read against Lance's `LsmScanner` and a model, merges (both
engines, both commit forms), and checks the base against the model; catch-up,
the region snapshot and GC then run over the evolved table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from memwal_core import register_spark_source
from memwal_core.errors import SchemaError
from memwal_core.model.evolution import TableFields
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.compact import compact
from memwal_core.services.consistency import check_consistency
from memwal_core.services.defaults import SINGLE, TWO_STEP
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.service import merge
from memwal_core.services.reader import lsm_scanner, plan_read
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.writer import MemWalWriter
from tests.support.engines import engine_called
from tests.support.schema import key_field

SCHEMA = pa.schema([key_field("id", pa.int64()), pa.field("v", pa.string()), pa.field("w", pa.int64())])
Row = dict[str, Any]


# Each change, made with Lance's own schema evolution on the base table.
CHANGES: dict[str, Callable[[lance.LanceDataset], None]] = {
    "add": lambda d: d.add_columns(pa.schema([pa.field("extra", pa.string())])),
    "rename": lambda d: d.alter_columns({"path": "v", "name": "v2"}),
    "drop": lambda d: d.drop_columns(["w"]),
}


def new_row(change: str, key: int) -> Row:
    """A row written after the change, in the new schema (the added column holds a value)."""
    return {
        "add": {"id": key, "v": f"new{key}", "w": key, "extra": f"x{key}"},
        "rename": {"id": key, "v2": f"new{key}", "w": key},
        "drop": {"id": key, "v": f"new{key}"},
    }[change]


def evolved_table(root: str, options: dict[str, str], change: str) -> dict[int, Row]:
    """The table after `change`, with generations of both schemas pending; the model of its rows."""
    uri = f"{root}/t"
    base = [{"id": k, "v": "base", "w": -k} for k in range(40)]
    lance.write_dataset(pa.Table.from_pylist(base, schema=SCHEMA), uri, storage_options=options or None)
    lance.dataset(uri, storage_options=options or None).initialize_mem_wal(bucket_column="id", num_buckets=2)
    model = {r["id"]: r for r in base}
    with MemWalWriter(uri, options or None, max_memtable_rows=8) as writer:
        for round_ in range(3):  # updates of base keys, new keys, and deletes: several generations a region
            rows = [{"id": k, "v": f"old{round_}", "w": round_} for k in range(round_ * 10, round_ * 10 + 20)]
            writer.put(pa.Table.from_pylist(rows, schema=SCHEMA))
            model.update({r["id"]: r for r in rows})
            writer.delete([35 + round_])
            model.pop(35 + round_, None)
    CHANGES[change](lance.dataset(uri, storage_options=options or None))
    model = {k: CHANGES_ROW[change](r) for k, r in model.items()}
    with MemWalWriter(uri, options or None, max_memtable_rows=8) as writer:  # opened after: the new schema
        rows = [new_row(change, k) for k in (5, 25, 100, 101)]
        writer.put(pa.Table.from_pylist(rows, schema=writer.schema))
        model.update({r["id"]: r for r in rows})
        writer.delete([6])
        model.pop(6)
    return model


# How a row of the old schema reads after each change.
CHANGES_ROW: dict[str, Callable[[Row], Row]] = {
    "add": lambda r: {**r, "extra": None},
    "rename": lambda r: {"id": r["id"], "v2": r["v"], "w": r["w"]},
    "drop": lambda r: {"id": r["id"], "v": r["v"]},
}


def keyed(rows: list[Row]) -> dict[int, Row]:
    out = {r["id"]: r for r in rows}
    assert len(out) == len(rows), "a key came back twice"
    return out


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize(
    ("store", "engine", "form"),
    [("local", "local", SINGLE), ("local", "spark", TWO_STEP), ("s3", "local", TWO_STEP)],
)
def test_merge_follows_the_schema_change(
    tmp_path: Path,
    change: str,
    store: str,
    engine: str,
    form: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if store == "s3":
        root, options = (
            f"s3://memwal-test/evolve-{uuid.uuid4().hex}",
            request.getfixturevalue("seaweed").storage_options(),
        )
    else:
        root, options = str(tmp_path), {}
    model = evolved_table(root, options, change)
    uri = f"{root}/t"
    with MemWalTable.open(uri, options or None) as table:
        # Lance's own MemWAL-aware read (its LsmScanner over every pending generation) equals the model,
        # and the consistency check (the independent second opinion GC waits for) agrees.
        assert keyed(lsm_scanner(table, plan_read(table)).to_table().to_pylist()) == model
        consistency = check_consistency(table)
        assert consistency.passed and consistency.expected_rows == len(model), consistency.mismatches
        result = merge(table, engine=engine_called(engine, request, monkeypatch, 4), commit_form=form)
        assert not result.failures, result.failures
        assert keyed(table.dataset().to_table().to_pylist()) == model
        assert not any(r.generations for r in plan_read(table).regions), "nothing left pending"
        # The other services run over the evolved table.
        catchup(table)
        build_snapshot(table)
        assert not compact(table, target_rows_per_fragment=16).failures
        assert not gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0)).failures
        assert keyed(lsm_scanner(table, plan_read(table)).to_table().to_pylist()) == model


def test_a_generation_that_cannot_read_as_the_table_names_its_column_and_generation(tmp_path: Path) -> None:
    """A column written as a type the table's cannot be read as (a change Lance refuses on a MemWAL
    table, so here a generation-like dataset written by hand) is refused, naming both."""
    written = pa.table({"id": pa.array([1], pa.int64()), "v": ["not a number"], "_tombstone": [False]})
    generation = lance.write_dataset(written, str(tmp_path / "g"))
    table = pa.schema([key_field("id", pa.int64()), pa.field("v", pa.int64())])
    fields = TableFields(table, (0, 1))
    with pytest.raises(SchemaError, match=r"region r generation 3: column v was written as string"):
        fields.read(generation, what="region r generation 3")
    added = TableFields(pa.schema([*table, pa.field("z", pa.int64(), nullable=False)]), (0, 1, 7))
    with pytest.raises(SchemaError, match="column z was added after it was written and may hold no nulls"):
        added.read(generation, columns=["id", "z"], what="region r generation 3")


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_spark_source_reads_generations_of_both_schemas(tmp_path: Path, change: str, spark: Any) -> None:
    """`spark.read.format("memwal")` over pending generations of the old and the new schema: the model."""
    model = evolved_table(str(tmp_path), {}, change)
    register_spark_source(spark)
    rows = spark.read.format("memwal").load(str(tmp_path / "t")).toArrow().to_pylist()
    assert keyed(rows) == model
