"""File naming of the MemWAL layout."""

from __future__ import annotations

import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.naming import (
    bitrev64,
    generation_from_dir_name,
    parse_bitrev64,
    region_manifest_name,
    region_snapshot_path,
    table_manifest_name,
    table_manifest_version,
    wal_entry_name,
)


def test_bitrev64_vectors_from_the_format_doc() -> None:
    assert bitrev64(5) == "1010" + "0" * 60
    assert bitrev64(1) == "1" + "0" * 63
    assert bitrev64(0) == "0" * 64
    assert bitrev64(2**64 - 1) == "1" * 64
    assert bitrev64(2**63) == "0" * 63 + "1"
    assert region_manifest_name(2) == "01" + "0" * 62 + ".binpb"
    assert wal_entry_name(3) == "11" + "0" * 62 + ".arrow"


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 1000, 123456789, 2**40 + 7, 2**64 - 1])
def test_bitrev64_round_trips(n: int) -> None:
    assert parse_bitrev64(bitrev64(n)) == n


def test_bitrev64_rejects_out_of_range_and_foreign_names() -> None:
    with pytest.raises(ValueError):
        bitrev64(-1)
    with pytest.raises(ValueError):
        bitrev64(2**64)
    with pytest.raises(CorruptMetadataError):
        parse_bitrev64("version_hint")
    with pytest.raises(CorruptMetadataError):
        parse_bitrev64("2" * 64)


def test_table_manifest_and_generation_names() -> None:
    assert table_manifest_name(1) == "18446744073709551614.manifest"
    assert table_manifest_name(2) == "18446744073709551613.manifest"
    assert table_manifest_version("18446744073709551613.manifest") == 2
    assert table_manifest_version(table_manifest_name(123)) == 123
    assert table_manifest_version("1.manifest") is None  # Lance's V1 names are not ours to read
    assert table_manifest_version("18446744073709551613.manifest.tmp") is None
    assert generation_from_dir_name("7390936d_gen_4") == 4
    assert generation_from_dir_name("7390936d_gen_12") == 12
    assert generation_from_dir_name("manifest") is None
    assert generation_from_dir_name("xyz_gen_1") is None


def test_region_snapshot_path() -> None:
    assert region_snapshot_path("d1b5") == "_indices/d1b5/index.lance"
