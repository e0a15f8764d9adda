"""A poller's clocks (backoff.py) run from what the writers change, not from what memwal's merges do."""

from __future__ import annotations

from pathlib import Path

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import SeenBacklog, Watched, backlog_since
from memwal_core.services.backoff import Backoff
from memwal_core.services.merge.service import merge
from memwal_core.services.writer import MemWalWriter

SENSOR = Backoff(tick=5.0, bound=225.0)
START = 1_000_000.0


def then(uri: str, before: Watched, at: float) -> SeenBacklog:
    """The sensor's reading of `uri` at START + `at`, after `before`."""
    with MemWalTable.open(uri) as table:
        return backlog_since(table, before, SENSOR, now=START + at)


def test_a_merge_that_catches_a_region_up_does_not_restart_its_backoff(tmp_path: Path) -> None:
    """A region flushed at T0 and merged (and seen merged) at T0 + 60 is idle since T0: probed every T/4 of that, not
    every tick again as if it had just changed (under a writer flushing every minute, that was most of
    the sensor's HEADs). Its reading is still right: caught up, with its flushed generations."""
    uri = str(tmp_path / "t")
    write_demo_table(uri, regions=2, rounds=2)
    start = START
    first = then(uri, Watched(), 0)
    regions = sorted(first.watched.seen)
    assert all(first.watched.clocks[r].changed_at == start for r in regions)
    assert all(b.pending for b in first.backlog.regions)
    with MemWalTable.open(uri) as table:
        assert not merge(table).failures
    after = then(uri, first.watched, 60)
    assert all(not b.pending for b in after.backlog.regions)
    assert [after.watched.clocks[r].changed_at for r in regions] == [start] * len(regions)
    assert [after.watched.clocks[r].probed_at for r in regions] == [start + 60] * len(regions)
    # Idle since the flush: probed every quarter of that (a tick early), next at +75, not every tick.
    assert not any(SENSOR.due(after.watched.clocks[r], start + t, r) for r in regions for t in (65, 70))
    assert all(SENSOR.due(after.watched.clocks[r], start + 75, r) for r in regions)


def test_a_claim_without_a_flush_does_not_restart_its_backoff(tmp_path: Path) -> None:
    """Lance's writer claims a region again at the first write after each flush: the manifest moves with
    nothing new to merge. The region is read again (its reading follows the version) but stays idle
    since its last flush, so a writer flushing every minute is not probed every tick after each claim."""
    uri = str(tmp_path / "t")
    write_demo_table(uri, regions=2, rounds=2)
    first = then(uri, Watched(), 0)
    regions = sorted(first.watched.seen)
    with MemWalWriter(uri, region=regions[0]) as writer:
        writer.claim()
    after = then(uri, first.watched, 60)
    claimed = after.watched.seen[regions[0]]
    assert claimed[0] > first.watched.seen[regions[0]][0], "the claim wrote a newer manifest version"
    assert claimed[1] == first.watched.seen[regions[0]][1], "nothing new to merge"
    assert [after.watched.clocks[r].changed_at for r in regions] == [START] * len(regions)
    assert not SENSOR.due(after.watched.clocks[regions[0]], START + 65, regions[0])
