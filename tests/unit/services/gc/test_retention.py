"""What GC keeps of a WAL and of manifest versions for the fence retention: everything younger."""

from __future__ import annotations

import math
import random

from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.retention import Retention, anchor_version, plan_retention
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
    versions = range(min(stored), latest + 1)
    anchor = anchor_version(versions, stored.get, NOW, POLICY.fence_retention_seconds)
    return plan_retention(versions, anchor, read, manifest(latest, replay[latest])), reads


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


def timed(times: list[float]) -> tuple[range, list[int], dict[int, float]]:
    """Versions 1..n written at `times` (seconds before NOW), and the list of versions timed (HEADs)."""
    created = {v: NOW - age for v, age in enumerate(times, start=1)}
    return range(1, len(times) + 1), [], created


def test_the_anchor_is_found_by_bisection_over_the_versions_times() -> None:
    """15,000 versions, one a minute: the anchor a listing finds, from log2(n) times, not n."""
    ages = [(15_000 - v) * 60.0 for v in range(1, 15_001)]
    versions, heads, created = timed(ages)

    def head(version: int) -> float | None:
        heads.append(version)
        return created.get(version)

    for retention in (0.0, 3_000.0, 7 * DAY, 15_000 * 60.0):
        heads.clear()
        listed = max((v for v in versions if NOW - created[v] > retention), default=None)
        assert anchor_version(versions, head, NOW, retention) == listed
        assert len(heads) <= 2 + math.log2(len(versions)), f"{len(heads)} versions timed"


def test_times_a_listing_read_narrow_the_bisection_to_the_step_between_them() -> None:
    """Every 16th version's time known (the sample an S3 listing page holds): 4 more HEADs at most."""
    ages = [(15_000 - v) * 60.0 for v in range(1, 15_001)]
    versions, heads, created = timed(ages)
    known = list(range(16, 15_001, 16))

    def head(version: int) -> float | None:
        if version not in known:
            heads.append(version)
        return created.get(version)

    for retention in (0.0, 3_000.0, 7 * DAY, 15_000 * 60.0):
        heads.clear()
        listed = max((v for v in versions if NOW - created[v] > retention), default=None)
        assert anchor_version(versions, head, NOW, retention, known) == listed
        assert len(heads) <= 1 + math.log2(16), f"{len(heads)} versions timed"


def test_times_out_of_order_only_make_the_anchor_older() -> None:
    """Whatever the times (a copied table), the anchor itself is older than the retention, and no newer
    than the one a listing would pick."""
    rng = random.Random(7)
    for _ in range(200):
        ages = [rng.uniform(0, 14) * DAY for _ in range(rng.randint(1, 40))]
        versions, _heads, created = timed(ages)
        listed = max((v for v in versions if NOW - created[v] > 7 * DAY), default=None)
        for known in ((), versions[rng.randrange(len(versions)) :: rng.randint(1, 8)]):
            anchor = anchor_version(versions, created.get, NOW, 7 * DAY, known)
            if anchor is not None:
                assert NOW - created[anchor] > 7 * DAY and listed is not None and anchor <= listed


def test_a_version_gone_meanwhile_is_never_the_anchor() -> None:
    versions, _heads, created = timed([9 * DAY, 8 * DAY, 1 * DAY])
    del created[2]
    assert anchor_version(versions, created.get, NOW, 7 * DAY) == 1
