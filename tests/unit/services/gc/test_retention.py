"""What GC keeps of a WAL and of manifest versions for the fence retention: everything younger."""

from __future__ import annotations

from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.retention import Retention, plan_retention
from memwal_core.services.gc.rules import GcPolicy

NOW = 10_000_000.0
DAY = 86_400.0
POLICY = GcPolicy(grace_seconds=0, fence_retention_seconds=7 * DAY)


def manifest(version: int, replay_after: int) -> RegionManifest:
    return RegionManifest(
        region="r",
        version=version,
        writer_epoch=1,
        replay_after_wal_entry_position=replay_after,
        wal_entry_position_last_seen=replay_after,
        current_generation=2,
        generations=(),
        spec_id=0,
        field_values=(),
        sealed=False,
        raw=b"",
    )


def plan(ages_in_days: dict[int, float], replay: dict[int, int]) -> tuple[Retention, list[int]]:
    """The retention of versions aged so (version -> days), each covering the WAL through `replay`,
    and the versions it read."""
    stored = {v: NOW - days * DAY for v, days in ages_in_days.items()}
    reads: list[int] = []

    def read(version: int) -> RegionManifest:
        reads.append(version)
        return manifest(version, replay[version])

    latest = max(stored)
    return plan_retention(stored, read, manifest(latest, replay[latest]), POLICY, NOW), reads


def test_nothing_younger_than_the_retention_goes_and_costs_no_read() -> None:
    retention, reads = plan({1: 6.9, 2: 3, 3: 0}, {1: 10, 2: 20, 3: 30})
    assert retention == Retention(None, range(0), 30) and reads == []


def test_the_anchor_is_the_newest_version_older_than_the_retention() -> None:
    # Versions 1-3 are older than a week; 3 is the anchor: WAL through its replay position goes.
    retention, _reads = plan({1: 20, 2: 10, 3: 8, 4: 2, 5: 0}, {1: 0, 2: 5, 3: 12, 4: 30, 5: 41})
    assert retention.anchor == 3 and list(retention.wal_delete) == list(range(1, 13))
    assert retention.wal_kept == 41 - 12


def test_a_later_run_deletes_from_where_the_last_one_stopped() -> None:
    # The previous run kept version 3 (its anchor) and deleted the WAL through 12.
    retention, reads = plan({3: 9, 4: 8, 5: 0}, {3: 12, 4: 30, 5: 41})
    assert retention.anchor == 4 and list(retention.wal_delete) == list(range(13, 31))
    assert sorted(reads) == [3, 4]


def test_an_anchor_already_the_oldest_frees_nothing_new() -> None:
    retention, reads = plan({3: 9, 4: 1}, {3: 12, 4: 30})
    assert retention.anchor == 3 and list(retention.wal_delete) == [] and retention.wal_kept == 18
    assert reads == [3]
