"""Region routing is bit-for-bit Lance's own (`lance.mem_wal.evaluate_sharding_spec` is the oracle)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import evaluate_sharding_spec

from memwal_core.model.routing import region_spec_of
from tests.support.schema import key_field

INT_RANGES = [
    (pa.int8(), -(2**7), 2**7 - 1),
    (pa.int16(), -(2**15), 2**15 - 1),
    (pa.int32(), -(2**31), 2**31 - 1),
    (pa.int64(), -(2**63), 2**63 - 1),
    (pa.uint8(), 0, 2**8 - 1),
    (pa.uint16(), 0, 2**16 - 1),
    (pa.uint32(), 0, 2**32 - 1),
    (pa.uint64(), 0, 2**64 - 1),
]


def _table(path: Path, typ: pa.DataType, **mode: Any) -> lance.LanceDataset:
    schema = pa.schema([key_field("k", typ)])
    sample = pa.array(["x"] if pa.types.is_string(typ) or pa.types.is_large_string(typ) else [1]).cast(typ)
    dataset = lance.write_dataset(pa.table({"k": sample}, schema=schema), str(path))
    dataset.initialize_mem_wal(**mode)
    return lance.dataset(str(path))


def _assert_same(dataset: lance.LanceDataset, values: pa.Array) -> None:
    batch = pa.record_batch({"k": values})
    spec = (dataset.mem_wal_index_details() or {})["sharding_specs"][0]
    expected = evaluate_sharding_spec(batch, spec, dataset.lance_schema).column(0)
    ours = region_spec_of(dataset)
    assert ours is not None
    got = ours.values(batch)
    mismatches = [
        i for i, (a, b) in enumerate(zip(expected.to_pylist(), got.to_pylist(), strict=True)) if a != b
    ]
    assert not mismatches, f"{len(mismatches)} rows differ, first {values[mismatches[0]]}"


@pytest.mark.parametrize("buckets", [1, 7, 1024])
@pytest.mark.parametrize(("typ", "low", "high"), INT_RANGES, ids=[str(t) for t, _, _ in INT_RANGES])
def test_bucket_of_integers(tmp_path: Path, typ: pa.DataType, low: int, high: int, buckets: int) -> None:
    rng = random.Random(f"{typ}{buckets}")
    values = [low, high, 0, 1, None, low + 1, high - 1] + [rng.randint(low, high) for _ in range(3000)]
    if low < 0:
        values += [-1, -2, -(2**31) if typ.bit_width >= 32 else low]
    dataset = _table(tmp_path / "t", typ, bucket_column="k", num_buckets=buckets)
    _assert_same(dataset, pa.array(values, typ))


@pytest.mark.parametrize("buckets", [1, 1024])
@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()], ids=str)
def test_bucket_of_strings(tmp_path: Path, typ: pa.DataType, buckets: int) -> None:
    """Every length mod 4 (Lance hashes string tails the Spark way), multi-byte UTF-8, empty and null."""
    rng = random.Random(3)
    values: list[str | None] = ["", None, "a", "ab", "abc", "abcd", "abcde", "ÿ", "日本語のキー", "\x7f\x80"]
    values += [
        "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(0, 41))) for _ in range(3000)
    ]
    dataset = _table(tmp_path / "t", typ, bucket_column="k", num_buckets=buckets)
    _assert_same(dataset, pa.array(values, typ))


def test_bucket_of_a_sliced_string_array(tmp_path: Path) -> None:
    """Arrow slices carry an offset into shared buffers; routing must honour it."""
    dataset = _table(tmp_path / "t", pa.string(), bucket_column="k", num_buckets=64)
    values = pa.array([f"key-{i}" for i in range(500)])
    _assert_same(dataset, values.slice(137, 200))


@pytest.mark.parametrize(
    ("typ", "values"),
    [(pa.string(), ["eu", "us", "", "eu", None]), (pa.int64(), [5, -3, 0, 2**62, None])],
    ids=["string", "int64"],
)
def test_identity(tmp_path: Path, typ: pa.DataType, values: list[Any]) -> None:
    dataset = _table(tmp_path / "t", typ, identity_column="k")
    _assert_same(dataset, pa.array(values, typ))


def test_unsharded_routes_everything_to_one_value(tmp_path: Path) -> None:
    dataset = _table(tmp_path / "t", pa.int64(), unsharded=True)
    _assert_same(dataset, pa.array([1, -5, 2**40], pa.int64()))


def test_manual_regions_have_no_spec(tmp_path: Path) -> None:
    assert region_spec_of(_table(tmp_path / "t", pa.int64())) is None
