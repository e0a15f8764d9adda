"""The region snapshot of the MemWAL index: one row per region, stored as a Lance file.

Columns follow the MemWAL spec: `region_id` (16 UUID bytes), `version` (the
region manifest version), `region_spec_id`, `writer_epoch`,
`replay_after_wal_id` and `wal_id_last_seen` (1-based WAL positions),
`current_generation`, `merged_generation`, `flushed_generations` as
list<struct<generation, path>>, and one `region_field_{field_id}` column per
region field of the table's region specs, typed by the field's
`result_type` (null for a region of another spec). The bytes are a Lance
file written by pylance's `LanceFileWriter`, so Lance can read them back.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.naming import REGION_SNAPSHOT_FILE
from memwal_core.format.proto import memwal_pb2 as pb

REGION_FIELD_PREFIX = "region_field_"

_INTEGERS = {f"{sign}int{bits}": (bits // 8, sign == "") for sign in ("", "u") for bits in (8, 16, 32, 64)}
_ARROW_TYPES: dict[str, pa.DataType] = {
    **{name: getattr(pa, name)() for name in _INTEGERS},
    "utf8": pa.utf8(),
    "large_utf8": pa.large_utf8(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
}

_FLUSHED = pa.list_(pa.struct([pa.field("generation", pa.uint64()), pa.field("path", pa.utf8())]))
_BASE_FIELDS = [
    pa.field("region_id", pa.binary(16), nullable=False),
    pa.field("version", pa.uint64(), nullable=False),
    pa.field("region_spec_id", pa.uint32(), nullable=False),
    pa.field("writer_epoch", pa.uint64(), nullable=False),
    pa.field("replay_after_wal_id", pa.uint64(), nullable=False),
    pa.field("wal_id_last_seen", pa.uint64(), nullable=False),
    pa.field("current_generation", pa.uint64(), nullable=False),
    pa.field("merged_generation", pa.uint64(), nullable=False),
    pa.field("flushed_generations", _FLUSHED, nullable=False),
]


@dataclass(frozen=True)
class RegionSnapshotRow:
    """One region as the snapshot records it."""

    region: str
    version: int
    spec_id: int
    writer_epoch: int
    replay_after_wal_entry_position: int
    wal_entry_position_last_seen: int
    current_generation: int
    merged_generation: int
    generations: tuple[tuple[int, str], ...]
    field_values: tuple[tuple[str, Any], ...] = ()


def region_field_types(specs: Iterable[pb.ShardingSpec]) -> dict[str, pa.DataType]:
    """The Arrow type of every region field of the table's specs, by field id."""
    types: dict[str, pa.DataType] = {}
    for spec in specs:
        for f in spec.fields:
            arrow = _ARROW_TYPES.get(f.result_type)
            if arrow is None:
                raise CorruptMetadataError(
                    f"region field {f.field_id!r} of spec {spec.spec_id} has unsupported type {f.result_type!r}"
                )
            if types.setdefault(f.field_id, arrow) != arrow:
                raise CorruptMetadataError(f"region field {f.field_id!r} has two types in the region specs")
    return types


def decode_field_value(raw: bytes, arrow: pa.DataType, *, field_id: str, region: str) -> Any:
    """A region field value from a region manifest: raw little-endian Arrow scalar bytes."""
    name = str(arrow)
    if name in ("string", "large_string"):
        return raw.decode("utf-8", errors="strict")
    if name in ("binary", "large_binary"):
        return raw
    if name == "bool":
        return bool(raw and raw[0])
    size, signed = _INTEGERS[name]
    if len(raw) != size:
        raise CorruptMetadataError(
            f"region {region}: field {field_id!r} holds {len(raw)} bytes, not the {size} of a {name}"
        )
    return int.from_bytes(raw, "little", signed=signed)


def snapshot_schema(field_types: dict[str, pa.DataType]) -> pa.Schema:
    extra = [pa.field(f"{REGION_FIELD_PREFIX}{fid}", t) for fid, t in sorted(field_types.items())]
    return pa.schema([*_BASE_FIELDS, *extra])


def to_arrow(rows: Sequence[RegionSnapshotRow], field_types: dict[str, pa.DataType]) -> pa.Table:
    """The snapshot table, one row per region in the order given."""
    columns: dict[str, list[Any]] = {
        "region_id": [uuid.UUID(r.region).bytes for r in rows],
        "version": [r.version for r in rows],
        "region_spec_id": [r.spec_id for r in rows],
        "writer_epoch": [r.writer_epoch for r in rows],
        "replay_after_wal_id": [r.replay_after_wal_entry_position for r in rows],
        "wal_id_last_seen": [r.wal_entry_position_last_seen for r in rows],
        "current_generation": [r.current_generation for r in rows],
        "merged_generation": [r.merged_generation for r in rows],
        "flushed_generations": [[{"generation": g, "path": p} for g, p in r.generations] for r in rows],
    }
    for fid in sorted(field_types):
        columns[f"{REGION_FIELD_PREFIX}{fid}"] = [dict(r.field_values).get(fid) for r in rows]
    return pa.Table.from_pydict(columns, schema=snapshot_schema(field_types))


def from_arrow(table: pa.Table) -> list[RegionSnapshotRow]:
    """The rows of a decoded snapshot table."""
    fields = [n for n in table.column_names if n.startswith(REGION_FIELD_PREFIX)]
    rows = []
    for r in table.to_pylist():
        rows.append(
            RegionSnapshotRow(
                region=str(uuid.UUID(bytes=r["region_id"])),
                version=r["version"],
                spec_id=r["region_spec_id"],
                writer_epoch=r["writer_epoch"],
                replay_after_wal_entry_position=r["replay_after_wal_id"],
                wal_entry_position_last_seen=r["wal_id_last_seen"],
                current_generation=r["current_generation"],
                merged_generation=r["merged_generation"],
                generations=tuple((g["generation"], g["path"]) for g in r["flushed_generations"]),
                field_values=tuple((n[len(REGION_FIELD_PREFIX) :], r[n]) for n in fields if r[n] is not None),
            )
        )
    return rows


def encode(table: pa.Table) -> bytes:
    """The snapshot as the bytes of a Lance file (written by Lance's own file writer)."""
    from lance.file import LanceFileWriter

    with tempfile.TemporaryDirectory(prefix="memwal-snapshot-") as tmp:
        path = Path(tmp) / REGION_SNAPSHOT_FILE
        writer = LanceFileWriter(str(path), table.schema)
        writer.write_batch(table)
        writer.close()
        return path.read_bytes()


def decode(data: bytes, *, where: str) -> pa.Table:
    """The snapshot table in Lance file bytes."""
    from lance.file import LanceFileReader

    with tempfile.TemporaryDirectory(prefix="memwal-snapshot-") as tmp:
        path = Path(tmp) / REGION_SNAPSHOT_FILE
        path.write_bytes(data)
        try:
            table: pa.Table = LanceFileReader(str(path)).read_all().to_table()
        except (OSError, ValueError) as exc:
            raise CorruptMetadataError(f"region snapshot {where} is not a readable Lance file") from exc
    missing = [f.name for f in _BASE_FIELDS if f.name not in table.column_names]
    if missing:
        raise CorruptMetadataError(f"region snapshot {where} has no column {missing[0]!r}")
    return table
