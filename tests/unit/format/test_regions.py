"""How a region manifest's listed generations are read: Lance's echo of a re-applied flush is one generation."""

from __future__ import annotations

import uuid

import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import RegionManifest, uuid_to_proto

REGION = str(uuid.uuid4())


def manifest(*listed: tuple[int, str]) -> bytes:
    message = pb.ShardManifest(
        version=3, writer_epoch=1, current_generation=3, shard_id=uuid_to_proto(REGION)
    )
    for generation, path in listed:
        message.sstables.add(generation=generation, path=path)
    return message.SerializeToString()


def decode(data: bytes) -> RegionManifest:
    return RegionManifest.decode(data, where="m.binpb", region=REGION, version=3)


def test_same_generation_at_the_same_path_is_read_once() -> None:
    read = decode(manifest((1, "aa_gen_1"), (2, "bb_gen_2"), (2, "bb_gen_2")))
    assert [(g.generation, g.path) for g in read.generations] == [(1, "aa_gen_1"), (2, "bb_gen_2")]


def test_listed_out_of_order_comes_back_sorted() -> None:
    read = decode(manifest((2, "bb_gen_2"), (1, "aa_gen_1"), (2, "bb_gen_2")))
    assert read.generation_numbers == [1, 2]


def test_one_generation_at_two_paths_is_corruption_naming_both() -> None:
    with pytest.raises(CorruptMetadataError, match="generation 2 at two paths: bb_gen_2 and cc_gen_2"):
        decode(manifest((1, "aa_gen_1"), (2, "bb_gen_2"), (2, "cc_gen_2")))
