"""The MemWAL index details of a table version, read from its manifest file.

pylance 14 exposes only the configuration part of the details; merge progress
(`compacted_sstables`) and index catch-up live only in the manifest, so we
decode it ourselves: the file's last 16 bytes are `i64 position | u16 major |
u16 minor | "LANC"`; at `position` a u32 length and the `Manifest`; its
`index_section` is the offset of a u32 length and the `IndexSection`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

from google.protobuf.message import DecodeError

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.naming import MEM_WAL_DETAILS_TYPE_URL, MEM_WAL_INDEX_NAME
from memwal_core.format.primary_key import primary_key_from
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import uuid_to_str

_FOOTER = struct.Struct("<qHH4s")
_MAGIC = b"LANC"


@dataclass(frozen=True)
class IndexDetails:
    """What the `__lance_mem_wal` index records at one table version."""

    table_version: int
    merged: dict[str, int]
    index_catchup: dict[str, dict[str, int]]
    maintained_indexes: tuple[str, ...]
    maintain_all_indexes: bool
    num_regions: int
    snapshot_ts_millis: int
    has_inline_snapshot: bool
    raw: bytes = field(repr=False, compare=False)
    # The id of the `__lance_mem_wal` index; an external region snapshot lives under `_indices/{index_uuid}/`.
    index_uuid: str = ""
    # The table's primary key at this version, from its manifest's fields (empty from details alone).
    primary_key: tuple[str, ...] = ()

    def merged_generation(self, region: str) -> int:
        """Highest merged generation of `region`, 0 if none was merged."""
        return self.merged.get(region, 0)

    def to_proto(self) -> pb.MemWalIndexDetails:
        message = pb.MemWalIndexDetails()
        message.ParseFromString(self.raw)
        return message


def _length_prefixed(data: bytes, offset: int, *, what: str, where: str) -> bytes:
    if offset < 0 or offset + 4 > len(data):
        raise CorruptMetadataError(
            f"table manifest {where} is truncated: {what} offset {offset} is past its end"
        )
    (length,) = struct.unpack_from("<I", data, offset)
    end = offset + 4 + length
    if end > len(data):
        raise CorruptMetadataError(f"table manifest {where} is truncated inside its {what}")
    return data[offset + 4 : end]


def _parse(message_type: type[pb.Manifest] | type[pb.IndexSection], payload: bytes, where: str) -> object:
    message = message_type()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CorruptMetadataError(
            f"table manifest {where} has an undecodable {message_type.__name__}"
        ) from exc
    return message


def _progress(entries: object, *, where: str) -> dict[str, int]:
    progress: dict[str, int] = {}
    for entry in entries:  # type: ignore[attr-defined]
        progress[uuid_to_str(entry.shard_id, what=f"merge progress in {where}")] = entry.generation
    return progress


def decode_details(payload: bytes, *, table_version: int, where: str, index_uuid: str = "") -> IndexDetails:
    """Decode a `MemWalIndexDetails` message."""
    details = pb.MemWalIndexDetails()
    try:
        details.ParseFromString(payload)
    except DecodeError as exc:
        raise CorruptMetadataError(f"MemWAL index details in {where} cannot be decoded") from exc
    return IndexDetails(
        table_version=table_version,
        merged=_progress(details.compacted_sstables, where=where),
        index_catchup={
            c.index_name: _progress(c.caught_up_generations, where=where) for c in details.index_catchup
        },
        maintained_indexes=tuple(details.maintained_indexes),
        maintain_all_indexes=details.maintain_all_indexes,
        num_regions=details.num_shards,
        snapshot_ts_millis=details.snapshot_ts_millis,
        has_inline_snapshot=details.HasField("inline_snapshots"),
        raw=payload,
        index_uuid=index_uuid,
    )


def read_index_details(manifest: bytes, *, where: str) -> IndexDetails | None:
    """The MemWAL details in a table manifest file's bytes; None if MemWAL is not enabled."""
    if len(manifest) < _FOOTER.size:
        raise CorruptMetadataError(f"table manifest {where} is truncated ({len(manifest)} bytes)")
    position, _major, _minor, magic = _FOOTER.unpack_from(manifest, len(manifest) - _FOOTER.size)
    if magic != _MAGIC:
        raise CorruptMetadataError(f"table manifest {where} is truncated or corrupt (no LANC footer)")
    body = _length_prefixed(manifest, position, what="manifest", where=where)
    table = _parse(pb.Manifest, body, where)
    assert isinstance(table, pb.Manifest)
    if not table.HasField("index_section"):
        return None
    section = _parse(
        pb.IndexSection,
        _length_prefixed(manifest, table.index_section, what="index section", where=where),
        where,
    )
    assert isinstance(section, pb.IndexSection)
    for index in section.indices:
        if index.name != MEM_WAL_INDEX_NAME:
            continue
        type_url = index.index_details.type_url
        if type_url.rsplit("/", 1)[-1] != MEM_WAL_DETAILS_TYPE_URL.lstrip("/"):
            raise CorruptMetadataError(f"{MEM_WAL_INDEX_NAME} in {where} has details of type {type_url!r}")
        details = decode_details(
            index.index_details.value,
            table_version=table.version,
            where=where,
            index_uuid=uuid_to_str(index.uuid, what=f"{MEM_WAL_INDEX_NAME} in {where}"),
        )
        top_level = (
            (f.name, {k.encode(): v for k, v in f.metadata.items()}) for f in table.fields if f.parent_id < 0
        )
        return replace(details, primary_key=tuple(primary_key_from(top_level)))
    return None
