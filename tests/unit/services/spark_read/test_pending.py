"""Which base rows pending generations make stale: the same answer from the range map and the hash index."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.services.spark_read.pending import pending_keys_of

INT64 = pa.int64()


def keys(values: list[object], typ: pa.DataType = INT64, name: str = "id") -> pa.Table:
    return pa.table({name: pa.array(values, typ)})


def kept(pending: dict[str, list[pa.Table]], base: pa.Table, key: tuple[str, ...] = ("id",)) -> list[object]:
    found = pending_keys_of(pending, key)
    rows = found.current(base.to_batches()[0])
    return rows.column(0).to_pylist()


@pytest.mark.parametrize(
    ("typ", "spread"),
    [(pa.int64(), 1), (pa.int32(), 1), (pa.uint16(), 1), (pa.int64(), 10**12), (pa.uint64(), 1)],
    ids=["int64", "int32", "uint16", "sparse-int64", "uint64"],
)
def test_base_rows_of_pending_keys_are_left_out(typ: pa.DataType, spread: int) -> None:
    pending = {
        "a": [keys([2 * spread, 4 * spread], typ), keys([4 * spread, 6 * spread], typ)],  # 4 written twice
        "b": [keys([9 * spread], typ)],
    }
    base = keys([s * spread for s in range(12)], typ)
    assert kept(pending, base) == [s * spread for s in (0, 1, 3, 5, 7, 8, 10, 11)]


def test_integers_close_together_take_the_range_map_and_spread_ones_the_hash_index() -> None:
    close = pending_keys_of({"a": [keys(list(range(100, 200)))]}, ("id",))
    spread = pending_keys_of({"a": [keys([0, 10**12])]}, ("id",))
    assert close.ranged is not None and len(close.ranged.owner) == 100 and close.hashed is None
    assert spread.ranged is None and spread.hashed is not None


def test_text_and_composite_keys() -> None:
    text = {"a": [keys(["x", "y"], pa.string(), "k")], "b": [keys(["z"], pa.string(), "k")]}
    assert kept(text, keys(["w", "x", "z"], pa.string(), "k"), ("k",)) == ["w"]
    pair = {"a": [pa.table({"t": ["a", "b"], "id": [1, 1]})]}
    base = pa.table({"t": ["a", "a", "b", "b"], "id": [1, 2, 1, 2]})
    found = pending_keys_of(pair, ("t", "id")).current(base.to_batches()[0])
    assert list(zip(found.column("t").to_pylist(), found.column("id").to_pylist(), strict=True)) == [
        ("a", 2),
        ("b", 2),
    ]


def test_no_pending_key_keeps_every_row() -> None:
    assert kept({"a": [keys([])]}, keys([1, 2])) == [1, 2]


@pytest.mark.parametrize(
    "pending",
    [
        {"a": [keys([1, 2])], "b": [keys([3]), keys([2])]},
        {"a": [keys([1, 10**12])], "b": [keys([10**12])]},
        {"a": [keys(["p", "q"], pa.string())], "b": [keys(["q"], pa.string())]},
    ],
    ids=["range", "hash", "text"],
)
def test_a_key_two_regions_hold_is_refused_naming_both(pending: dict[str, list[pa.Table]]) -> None:
    with pytest.raises(CorruptMetadataError, match="regions a, b all hold primary key"):
        pending_keys_of(pending, ("id",))
