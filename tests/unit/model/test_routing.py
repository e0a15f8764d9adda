"""Routing rules without Lance: region values as bytes, specs from details, rows split by region."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from memwal_core.errors import MemWalNotEnabledError, SchemaError
from memwal_core.model.routing import RegionSpec, partition_by_code, scalar_bytes


@pytest.mark.parametrize(
    ("value", "typ", "expected"),
    [
        (-2, pa.int32(), (-2).to_bytes(4, "little", signed=True)),
        (2**40, pa.int64(), (2**40).to_bytes(8, "little")),
        (255, pa.uint8(), b"\xff"),
        ("eu", pa.string(), b"eu"),
        (b"\x00\x01", pa.binary(), b"\x00\x01"),
        (True, pa.bool_(), b"\x01"),
        (None, pa.int64(), b""),
        (1.5, pa.float64(), np.float64(1.5).tobytes()),
    ],
)
def test_scalar_bytes_are_little_endian_arrow_values(value: Any, typ: pa.DataType, expected: bytes) -> None:
    assert scalar_bytes(pa.scalar(value, typ)) == expected


def test_a_type_without_a_byte_encoding_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        scalar_bytes(pa.scalar([1], pa.list_(pa.int64())))


def spec(fields: list[dict[str, Any]], spec_id: int = 1) -> dict[str, Any]:
    return {"sharding_specs": [{"spec_id": spec_id, "fields": fields}]}


def test_the_newest_spec_is_resolved_to_its_column() -> None:
    bucket = {
        "field_id": "bucket",
        "transform": "bucket",
        "source_ids": [3],
        "parameters": {"num_buckets": "8"},
    }
    details = {
        "sharding_specs": [spec([bucket], 1)["sharding_specs"][0], spec([bucket], 4)["sharding_specs"][0]]
    }
    resolved = RegionSpec.from_details(details, {3: "user_id"})
    assert resolved == RegionSpec(
        spec_id=4, field_id="bucket", transform="bucket", column="user_id", num_buckets=8
    )


def test_manual_regions_have_no_spec() -> None:
    assert RegionSpec.from_details({}, {}) is None


@pytest.mark.parametrize(
    "fields",
    [
        [{"field_id": "a", "transform": "bucket"}, {"field_id": "b", "transform": "bucket"}],
        [{"field_id": "a", "transform": "truncate", "source_ids": [1]}],
    ],
    ids=["two-fields", "unknown-transform"],
)
def test_specs_lance_14_never_writes_are_refused(fields: list[dict[str, Any]]) -> None:
    with pytest.raises(MemWalNotEnabledError):
        RegionSpec.from_details(spec(fields), {1: "x"})


def test_identity_routes_each_distinct_value_to_its_own_region_key() -> None:
    identity = RegionSpec(spec_id=1, field_id="bucket", transform="identity", column="zone")
    codes, keys = identity.route(pa.table({"zone": ["eu", "us", "eu", "ap"]}))
    assert [keys[c] for c in codes] == [(("bucket", v),) for v in (b"eu", b"us", b"eu", b"ap")]


def test_unsharded_routes_everything_to_bucket_zero() -> None:
    one = RegionSpec(spec_id=1, field_id="bucket", transform="unsharded", column=None)
    codes, keys = one.route(pa.table({"id": [5, 6]}))
    assert codes.tolist() == [0, 0] and keys == [(("bucket", b"\x00\x00\x00\x00"),)]


def test_partition_by_code_keeps_each_regions_rows_in_input_order() -> None:
    rows = pa.table({"id": [10, 11, 12, 13, 14]})
    parts = partition_by_code(rows, np.array([2, 0, 2, 2, 0], dtype=np.int32), 4)
    assert [p["id"].to_pylist() if p is not None else None for p in parts] == [
        [11, 14],
        None,
        [10, 12, 13],
        None,
    ]


def test_partition_by_code_with_one_region_does_not_copy() -> None:
    rows = pa.table({"id": [1, 2]})
    parts = partition_by_code(rows, np.array([1, 1], dtype=np.int32), 3)
    assert parts[1] is rows and parts[0] is None and parts[2] is None


def test_murmur3_equals_the_reference_where_the_variants_agree() -> None:
    """mmh3 (the reference Murmur3 x86_32) as a second oracle, without Lance.

    Lance's hash is the reference one for 4- and 8-byte integers and for strings whose
    byte length is a multiple of 4; string tails follow Spark's variant instead.
    """
    import mmh3

    from memwal_core.model.routing import murmur3_hash

    rng = random.Random(11)
    ints32 = [rng.randint(-(2**31), 2**31 - 1) for _ in range(2000)] + [0, -1, 2**31 - 1]
    ints64 = [rng.randint(-(2**63), 2**63 - 1) for _ in range(2000)] + [0, -1, 2**63 - 1]
    words = [
        "",
        "abcd",
        "日本語の",
        *("".join(rng.choice("abcdef") for _ in range(4 * n)) for n in range(50)),
    ]
    cases: list[tuple[pa.Array, list[bytes]]] = [
        (pa.array(ints32, pa.int32()), [v.to_bytes(4, "little", signed=True) for v in ints32]),
        (pa.array(ints64, pa.int64()), [v.to_bytes(8, "little", signed=True) for v in ints64]),
        (pa.array(words, pa.string()), [w.encode() for w in words]),
    ]
    for array, encoded in cases:
        assert all(len(e) % 4 == 0 for e in encoded)
        expected = [mmh3.hash(e, 0, signed=False) for e in encoded]
        assert [int(h) for h in murmur3_hash(array)] == expected, array.type
