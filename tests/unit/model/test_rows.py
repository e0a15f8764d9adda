"""`conform`: the one rule for rows entering a table, from a writer's put or a merge's collapse."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memwal_core.errors import SchemaError
from memwal_core.model.rows import conform
from tests.support.schema import PRIMARY_KEY

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("count", pa.int32(), nullable=False),
        pa.field("name", pa.string()),
    ],
    metadata={"owner": "test"},
)


def rows(**columns: pa.Array) -> pa.Table:
    return pa.table(columns)


GOOD = {
    "id": pa.array([1, 2], pa.int64()),
    "count": pa.array([10, 20], pa.int32()),
    "name": pa.array(["a", None], pa.string()),
}


def test_rows_that_fit_come_back_in_the_table_schema_with_its_metadata() -> None:
    shuffled = rows(name=GOOD["name"], count=GOOD["count"], id=GOOD["id"])
    conformed = conform(shuffled, SCHEMA)
    assert conformed.schema.equals(SCHEMA, check_metadata=True)
    assert conformed.column("id").to_pylist() == [1, 2]


def test_nulls_in_a_non_nullable_column_are_refused_with_the_column_named() -> None:
    with pytest.raises(SchemaError, match="column count has 1 null value"):
        conform(rows(**{**GOOD, "count": pa.array([None, 20], pa.int32())}), SCHEMA, what="put")
    with pytest.raises(SchemaError, match=r"^region r: column id has 1 null value"):
        conform(
            rows(**{**GOOD, "id": pa.array([1, None], pa.int64())}), SCHEMA, drop_extra=True, what="region r"
        )
    assert conform(rows(**GOOD), SCHEMA).column("name").null_count == 1  # a nullable column may hold nulls


@pytest.mark.parametrize(
    ("column", "values", "was"),
    [
        ("id", pa.array([1, 2], pa.int32()), "int32"),
        ("count", pa.array([10, 20], pa.int64()), "int64"),
        ("name", pa.array(["a", "b"], pa.large_string()), "large_string"),
    ],
    ids=["widening", "narrowing-in-range", "large-string"],
)
def test_a_safe_cast_is_accepted(column: str, values: pa.Array, was: str) -> None:
    conformed = conform(rows(**{**GOOD, column: values}), SCHEMA)
    assert conformed.schema.field(column).type == SCHEMA.field(column).type
    assert conformed.column(column).to_pylist() == values.to_pylist(), was


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("count", pa.array([10, 2**40], pa.int64()), "column count: cannot cast int64 to int32"),
        ("id", pa.array([1.0, 2.5], pa.float64()), "column id: cannot cast double to int64"),
        ("id", pa.array(["1", "two"], pa.string()), "column id: cannot cast string to int64"),
    ],
    ids=["overflow", "lost-fraction", "not-a-number"],
)
def test_an_unsafe_cast_is_refused(column: str, values: pa.Array, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        conform(rows(**{**GOOD, column: values}), SCHEMA)


def test_extra_columns_are_refused_unless_dropped_and_missing_ones_named() -> None:
    with_tombstone = rows(**GOOD, _tombstone=pa.array([False, False]))
    with pytest.raises(SchemaError, match="column _tombstone is not in the table schema"):
        conform(with_tombstone, SCHEMA)
    assert conform(with_tombstone, SCHEMA, drop_extra=True).schema.names == SCHEMA.names
    with pytest.raises(SchemaError, match="generation 3: column count is missing"):
        conform(rows(id=GOOD["id"], name=GOOD["name"]), SCHEMA, drop_extra=True, what="generation 3")


def test_required_columns_only_for_deletes() -> None:
    keys = conform(rows(id=pa.array([7], pa.int32()), other=pa.array([1])), SCHEMA, required=["id"])
    assert keys.schema.names == ["id"] and keys.schema.field("id").type == pa.int64()
