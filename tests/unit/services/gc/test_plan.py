"""The version that first stopped listing a pruned generation: found by binary search, one read per step."""

from __future__ import annotations

from memwal_core.format.regions import FlushedGeneration, RegionManifest
from memwal_core.services.gc.plan import first_unlisting_version


def manifest(version: int, current: int, listed: list[int]) -> RegionManifest:
    return RegionManifest(
        region="r",
        version=version,
        writer_epoch=1,
        replay_after_wal_entry_position=0,
        wal_entry_position_last_seen=0,
        current_generation=current,
        generations=tuple(FlushedGeneration(g, f"abcd1234_gen_{g}") for g in listed),
        spec_id=0,
        field_values=(),
        sealed=False,
        raw=b"",
    )


def history() -> dict[int, RegionManifest]:
    """v1 claims; v2-v4 flush generations 1-3; v5 prunes 1; v6 flushes 4; v7 prunes 2."""
    return {
        1: manifest(1, 1, []),
        2: manifest(2, 2, [1]),
        3: manifest(3, 3, [1, 2]),
        4: manifest(4, 4, [1, 2, 3]),
        5: manifest(5, 4, [2, 3]),
        6: manifest(6, 5, [2, 3, 4]),
        7: manifest(7, 5, [3, 4]),
    }


def test_finds_the_version_that_pruned_each_generation() -> None:
    versions = history()
    reads: list[int] = []

    def read(v: int) -> RegionManifest:
        reads.append(v)
        return versions[v]

    stored = sorted(versions)
    assert first_unlisting_version(stored, read, 1, "abcd1234_gen_1") == 5
    assert first_unlisting_version(stored, read, 2, "abcd1234_gen_2") == 7
    assert len(reads) <= 2 * 3, "a binary search, not a scan"


def test_a_version_before_the_flush_does_not_count_as_unlisting() -> None:
    """v1-v3 do not list generation 3 either, but only because it was not flushed yet."""
    versions = history()
    versions[8] = manifest(8, 5, [4])
    assert first_unlisting_version(sorted(versions), versions.__getitem__, 3, "abcd1234_gen_3") == 8


def test_only_the_newest_versions_left_after_gc_trimmed_the_old_ones() -> None:
    versions = {v: m for v, m in history().items() if v >= 6}
    assert first_unlisting_version(sorted(versions), versions.__getitem__, 1, "abcd1234_gen_1") == 6
