"""Region routing: each row's region value, computed exactly as Lance 14 computes it.

Lance records a table's region spec (`ShardingSpec`) in the MemWAL index
details; `lance.mem_wal.evaluate_sharding_spec` is its evaluator. We compute
the same values vectorised over whole Arrow columns with numpy, because the
writer and the Spark ingestion job route every row and a per-row Python hash
would cost more than the write itself.

The `bucket` hash is Murmur3 x86_32 with seed 0 over the value's little-endian
bytes (8/16/32-bit integers and booleans widened to 4 bytes, 64-bit integers
as 8, strings as their UTF-8 bytes), then `(hash & 0x7fffffff) % num_buckets`;
null goes to bucket 0. For strings Lance follows Spark's Murmur3 variant: the
0-3 tail bytes are each sign-extended and mixed as a whole block, so the
result differs from the reference `mmh3` whenever the length is not a
multiple of 4.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import MemWalNotEnabledError, SchemaError

# A region's identity within a spec: its field values as Lance records them
# in the region manifest (`shard_field_entries`: field id -> raw LE bytes).
RegionKey = tuple[tuple[str, bytes], ...]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_WIDENED = {pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.bool_()}
_WIDE = {pa.int64(), pa.uint64()}


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    """One Murmur3 block: mix k1 into h1."""
    k1 = _rotl(k1 * _C1, 15) * _C2
    h1 = _rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    mixed: np.ndarray = h1 ^ (h1 >> np.uint32(16))
    return mixed


def _hash_words(words: Sequence[np.ndarray], length: int) -> np.ndarray:
    h1 = np.zeros(len(words[0]), dtype=np.uint32)
    for word in words:
        h1 = _mix(h1, word)
    return _fmix(h1, length)


def _hash_strings(array: pa.Array) -> np.ndarray:
    """Spark-variant Murmur3 of every string, one numpy pass per 4-byte block position."""
    array = array.cast(pa.large_binary()) if not pa.types.is_large_binary(array.type) else array
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64, count=n + 1, offset=array.offset * 8)
    data_buffer = array.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = (offsets[1:] - starts).astype(np.int64)
    blocks = lengths // 4
    h1 = np.zeros(n, dtype=np.uint32)
    for b in range(int(blocks.max(initial=0))):
        rows = np.nonzero(blocks > b)[0]
        at = starts[rows] + 4 * b
        word = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[rows] = _mix(h1[rows], word)
    for t in range(3):
        rows = np.nonzero(lengths % 4 > t)[0]
        tail = data[starts[rows] + 4 * blocks[rows] + t].view(np.int8).astype(np.int32).view(np.uint32)
        h1[rows] = _mix(h1[rows], tail)
    return _fmix(h1, lengths.astype(np.uint32))


def murmur3_hash(array: pa.Array) -> np.ndarray:
    """Lance's bucket hash of every value (uint32; nulls hash as 0 and are bucketed apart)."""
    typ = array.type
    if typ in _WIDENED:
        ints = pc.fill_null(array.cast(pa.int32()), 0).to_numpy(zero_copy_only=False)
        return _hash_words([ints.view(np.uint32)], 4)
    if typ == pa.uint32():
        return _hash_words([pc.fill_null(array, 0).to_numpy(zero_copy_only=False)], 4)
    if typ in _WIDE:
        wide = (
            pc.fill_null(array, 0)
            .to_numpy(zero_copy_only=False)
            .astype(typ.to_pandas_dtype())
            .view(np.uint64)
        )
        low = (wide & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return _hash_words([low, (wide >> np.uint64(32)).astype(np.uint32)], 8)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _hash_strings(pc.fill_null(array, ""))
    raise SchemaError(f"region routing cannot hash a column of type {typ}")


@dataclass(frozen=True)
class RegionField:
    """One field of a region spec: how a region value derives from source columns."""

    field_id: str
    transform: str
    column: str | None
    num_buckets: int


@dataclass(frozen=True)
class RegionSpec:
    """A table's current region spec, resolved to a column name.

    Lance 14 writes single-field specs only (`bucket`, `identity` or
    `unsharded`), so a spec with more fields is refused rather than guessed at.
    """

    spec_id: int
    field_id: str
    transform: str
    column: str | None
    num_buckets: int = 1

    @classmethod
    def from_details(cls, details: Mapping[str, Any], columns: Mapping[int, str]) -> RegionSpec | None:
        """The newest spec in `mem_wal_index_details()`; None for a manually-regioned table.

        `columns` maps the table's Lance field ids to column names (specs name source fields by id).
        """
        specs = details.get("sharding_specs") or []
        if not specs:
            return None
        spec = max(specs, key=lambda s: int(s["spec_id"]))
        if len(spec["fields"]) != 1:
            raise MemWalNotEnabledError(
                f"region spec {spec['spec_id']} has {len(spec['fields'])} fields; Lance 14 writes exactly one"
            )
        (field,) = spec["fields"]
        transform = field.get("transform") or ""
        if transform not in ("bucket", "identity", "unsharded"):
            raise MemWalNotEnabledError(
                f"region spec {spec['spec_id']} uses transform {transform!r}, unsupported"
            )
        sources = list(field.get("source_ids") or [])
        return cls(
            spec_id=int(spec["spec_id"]),
            field_id=str(field["field_id"]),
            transform=transform,
            column=columns[sources[0]] if sources else None,
            num_buckets=int((field.get("parameters") or {}).get("num_buckets", 1)),
        )

    def values(self, rows: pa.Table | pa.RecordBatch) -> pa.Array:
        """Each row's region value, as `evaluate_sharding_spec` gives it."""
        if self.column is None:
            return pa.array(np.zeros(rows.num_rows, dtype=np.int32))
        column = rows.column(self.column)
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if self.transform == "identity":
            return array
        hashed = murmur3_hash(array) & np.uint32(0x7FFFFFFF)
        buckets = (hashed % np.uint32(self.num_buckets)).astype(np.int32)
        if array.null_count:
            buckets[array.is_null().to_numpy(zero_copy_only=False)] = 0
        return pa.array(buckets)

    def route(self, rows: pa.Table | pa.RecordBatch) -> tuple[np.ndarray, list[RegionKey]]:
        """Per row, an index into the returned list of distinct region keys."""
        encoded = pc.dictionary_encode(self.values(rows))
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        return codes, [((self.field_id, scalar_bytes(v)),) for v in encoded.dictionary]


def region_spec_of(dataset: Any) -> RegionSpec | None:
    """The region spec of an open LanceDataset (None when its regions are manual)."""
    columns = {f.id(): f.name() for f in dataset.lance_schema.fields()}
    return RegionSpec.from_details(dataset.mem_wal_index_details() or {}, columns)


def scalar_bytes(scalar: pa.Scalar) -> bytes:
    """A region value as Lance stores it in a region manifest: raw little-endian Arrow bytes."""
    typ = scalar.type
    value = scalar.as_py()
    if value is None:
        return b""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return str(value).encode()
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return bytes(value)
    if pa.types.is_boolean(typ):
        return b"\x01" if value else b"\x00"
    if pa.types.is_integer(typ):
        return int(value).to_bytes(typ.bit_width // 8, "little", signed=pa.types.is_signed_integer(typ))
    if pa.types.is_floating(typ):
        return struct.pack("<d" if typ.bit_width == 64 else "<f", value)
    raise SchemaError(f"region value of type {typ} has no byte encoding")


def partition_by_code(rows: pa.Table, codes: np.ndarray, count: int) -> list[pa.Table | None]:
    """Rows split by region code, each part in its original order (later puts of a key still win)."""
    if count == 1:
        return [rows]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(count + 1))
    ordered = rows.take(pa.array(order))
    return [
        ordered.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])) if bounds[i + 1] > bounds[i] else None
        for i in range(count)
    ]
