"""Region manifests: decoding, validation and the immutable view the services use."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.proto import memwal_pb2 as pb


def uuid_to_str(message: pb.UUID, *, what: str) -> str:
    """The canonical string of a protobuf UUID (16 raw bytes)."""
    if len(message.uuid) != 16:
        raise CorruptMetadataError(f"{what} holds a {len(message.uuid)}-byte UUID, not 16 bytes")
    return str(uuid.UUID(bytes=bytes(message.uuid)))


def uuid_to_proto(region: str) -> pb.UUID:
    """The protobuf UUID of a region id string."""
    return pb.UUID(uuid=uuid.UUID(region).bytes)


@dataclass(frozen=True)
class FlushedGeneration:
    """One flushed generation listed in a region manifest."""

    generation: int
    path: str
    physical_rows: int | None = None
    in_memory_bytes: int | None = None


@dataclass(frozen=True)
class RegionManifest:
    """One version of a region manifest, with the raw bytes it was decoded from."""

    region: str
    version: int
    writer_epoch: int
    replay_after_wal_entry_position: int
    wal_entry_position_last_seen: int
    current_generation: int
    generations: tuple[FlushedGeneration, ...]
    spec_id: int
    field_values: tuple[tuple[str, bytes], ...]
    sealed: bool
    raw: bytes = field(repr=False, compare=False)

    @property
    def generation_numbers(self) -> list[int]:
        return [g.generation for g in self.generations]

    @property
    def wal_entries_to_replay(self) -> int:
        """WAL entries past the last flushed generation, which a new writer replays (as this version
        records them: Lance updates `wal_entry_position_last_seen` at every flush and claim)."""
        return max(0, self.wal_entry_position_last_seen - self.replay_after_wal_entry_position)

    def to_proto(self) -> pb.ShardManifest:
        """The protobuf message, with any fields this project does not name kept intact."""
        message = pb.ShardManifest()
        message.ParseFromString(self.raw)
        return message

    @classmethod
    def decode(cls, data: bytes, *, where: str, region: str, version: int) -> RegionManifest:
        """Decode and check a region manifest read from `where`."""
        message = pb.ShardManifest()
        try:
            message.ParseFromString(data)
        except DecodeError as exc:
            raise CorruptMetadataError(f"region manifest {where} is not a valid ShardManifest") from exc
        if not data:
            raise CorruptMetadataError(f"region manifest {where} is empty")
        if message.version != version:
            raise CorruptMetadataError(
                f"region manifest {where} records version {message.version}, its name says {version}"
            )
        if message.HasField("shard_id"):
            recorded = uuid_to_str(message.shard_id, what=f"region manifest {where}")
            if recorded != region:
                raise CorruptMetadataError(f"region manifest {where} belongs to region {recorded}")
        generations = _distinct_generations(message, where)
        if any(not g.path or "/" in g.path or g.path in (".", "..") for g in generations):
            raise CorruptMetadataError(f"region manifest {where} lists a generation outside its region")
        return cls(
            region=region,
            version=message.version,
            writer_epoch=message.writer_epoch,
            replay_after_wal_entry_position=message.replay_after_wal_entry_position,
            wal_entry_position_last_seen=message.wal_entry_position_last_seen,
            current_generation=message.current_generation,
            generations=generations,
            spec_id=message.shard_spec_id,
            field_values=tuple((e.field_id, bytes(e.value)) for e in message.shard_field_entries),
            sealed=message.status == pb.SEALED,
            raw=data,
        )


def _distinct_generations(message: pb.ShardManifest, where: str) -> tuple[FlushedGeneration, ...]:
    """The listed generations by number, each once.

    Lance's writer lists a generation twice when the response to its flush's
    manifest PUT is lost: the retry meets the version it wrote itself, takes it
    for another writer's, and re-applies the flush on top, copying the
    duplicate into every later version. The same number at the same path is
    that echo, read as one generation; two paths under one number is
    corruption, named with both paths.
    """
    listed: dict[int, FlushedGeneration] = {}
    for s in message.sstables:
        seen = listed.get(s.generation)
        if seen is not None:
            if seen.path != s.path:
                raise CorruptMetadataError(
                    f"region manifest {where} lists generation {s.generation} at two paths: "
                    f"{seen.path} and {s.path}"
                )
            continue
        listed[s.generation] = FlushedGeneration(
            generation=s.generation,
            path=s.path,
            physical_rows=s.physical_rows if s.HasField("physical_rows") else None,
            in_memory_bytes=s.in_memory_bytes if s.HasField("in_memory_bytes") else None,
        )
    return tuple(listed[n] for n in sorted(listed))
