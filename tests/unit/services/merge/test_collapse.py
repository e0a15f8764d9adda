"""The collapse of a region's generations: newest write per key wins, a winning tombstone deletes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memwal_core.errors import SchemaError
from memwal_core.services.merge.collapse import (
    REGION_COLUMN,
    TOMBSTONE,
    collapse_tables,
    shared_key,
    with_region,
)

BASE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def generation(rows: list[tuple[int, str | None, bool]]) -> pa.Table:
    ids, values, tombs = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()), TOMBSTONE: pa.array(tombs)}
    )


def collapsed(*generations: pa.Table) -> tuple[dict[int, str | None], list[int]]:
    live, deleted = collapse_tables(list(generations), ["id"], BASE, what="region r")
    assert live.schema.names == BASE.names
    return dict(zip(live["id"].to_pylist(), live["v"].to_pylist(), strict=True)), sorted(
        deleted["id"].to_pylist()
    )


def test_the_newest_generation_wins_per_key() -> None:
    g1 = generation([(1, "a", False), (2, "b", False), (3, "c", False)])
    g2 = generation([(2, "B", False), (4, "d", False)])
    g3 = generation([(3, None, True), (1, "A", False)])
    assert collapsed(g1, g2, g3) == ({1: "A", 2: "B", 4: "d"}, [3])


def test_a_put_after_a_delete_revives_the_key() -> None:
    assert collapsed(generation([(7, None, True)]), generation([(7, "back", False)])) == ({7: "back"}, [])


def test_the_last_write_within_one_generation_wins() -> None:
    g = generation([(5, "first", False), (5, None, True), (5, "last", False)])
    assert collapsed(generation([]), g) == ({5: "last"}, [])


def test_a_generation_without_tombstones_is_not_a_flushed_generation() -> None:
    with pytest.raises(SchemaError, match=TOMBSTONE):
        collapse_tables([pa.table({"id": [1], "v": ["x"]})], ["id"], BASE, what="region r")


def test_a_null_key_is_refused_naming_the_column() -> None:
    g = pa.table({"id": pa.array([1, None], pa.int64()), "v": ["x", "y"], TOMBSTONE: [False, False]})
    with pytest.raises(SchemaError, match="'id'"):
        collapse_tables([generation([(1, "a", False)]), g], ["id"], BASE, what="region r")


def region_keys(rows: dict[str, list[tuple[int, str]]]) -> pa.Table:
    """Key columns (`id`, `k`) of each region's rows, with their region, as a batch gathers them."""
    tables = [
        with_region(
            pa.table({"id": pa.array([i for i, _ in keys], pa.int64()), "k": [k for _, k in keys]}), r
        )
        for r, keys in rows.items()
    ]
    return pa.concat_tables(tables)


def test_with_region_names_every_row_as_a_string_column() -> None:
    rows = with_region(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), "r1")
    assert rows.schema.field(REGION_COLUMN).type == pa.string()
    assert rows[REGION_COLUMN].to_pylist() == ["r1", "r1", "r1"]
    assert with_region(pa.table({"id": pa.array([], pa.int64())}), "r1").num_rows == 0


def test_a_key_two_regions_hold_is_found_with_every_region_that_holds_it() -> None:
    keys = region_keys(
        {"a": [(1, "x"), (2, "x")], "b": [(3, "x"), (2, "y")], "c": [(1, "x")], "d": [(1, "x")]}
    )
    assert shared_key(keys, ["id"]) == ((1,), ["a", "c", "d"])
    assert shared_key(keys, ["id", "k"]) == ((1, "x"), ["a", "c", "d"])
    apart = region_keys({"a": [(1, "x"), (2, "x")], "b": [(3, "x"), (2, "y")]})
    assert shared_key(apart, ["id", "k"]) is None, "a composite key differs in its second column"
    assert shared_key(apart.slice(0, 0), ["id"]) is None
