"""A poller's clocks (backoff.py) run from what the writers change, not from what memwal's merges do."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import TABLE_VERSIONS_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import SeenBacklog, Watched, backlog_since
from memwal_core.services.backoff import Backoff, Clock, probed
from memwal_core.services.merge.service import merge
from memwal_core.services.writer import MemWalWriter

SENSOR = Backoff(tick=5.0, bound=225.0)
START = 1_000_000.0


def probes_after(clock: Clock, key: str, at: float) -> list[float]:
    """The ticks (seconds after START) at which the sensor probes `key` over the 30 s after `at`, finding
    nothing new."""
    probes: list[float] = []
    for t in range(int(at) + 5, int(at) + 35, 5):
        if SENSOR.due(clock, START + t, key):
            probes.append(t)
            clock = probed(clock, START + t, changed=False)
    return probes


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
    # Idle since the flush: probed once every quarter of that (15 s, at the region's phase), not every tick.
    for r in regions:
        probes = probes_after(after.watched.clocks[r], r, 60)
        assert 1 <= len(probes) <= 2 and probes[0] <= 75, probes


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
    assert len(probes_after(after.watched.clocks[regions[0]], regions[0], 60)) <= 2, "not every tick"


def flush_one_row(uri: str, region: str, key: int) -> None:
    """One generation of one row in `region`, by Lance's own writer (its close flushes)."""
    import lance
    import pyarrow as pa

    from memwal_core.demo import DEMO_SCHEMA

    with lance.dataset(uri).mem_wal_writer(region) as writer:
        writer.put(pa.table({"id": [key], "name": ["late"], "score": [1.0]}, schema=DEMO_SCHEMA))


def test_a_flush_seen_moments_after_a_probe_is_dated_by_that_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each flush cost the sensor and the exporter a HEAD to date it (its first manifest's time). One
    found within DATED_BY_PROBE_WITHIN of a probe that did not see it was flushed since that probe:
    dated by it, its age is at most that much over, for no request. One found after a longer quiet is
    dated by its files, as before."""
    uri = str(tmp_path / "t")
    write_demo_table(uri, regions=2, rounds=2)
    first = then(uri, Watched(), 0)
    with MemWalTable.open(uri) as table:
        assert not merge(table).failures
    second = then(uri, first.watched, 60)  # caught up; every region probed at +60
    regions = sorted(first.watched.seen)
    dated: list[str] = []

    def read_at(before: Watched, at: float) -> SeenBacklog:
        with MemWalTable.open(uri) as table:
            real = table.store.head

            def recording(path: str) -> object:
                dated.append(path)
                return real(path)

            monkeypatch.setattr(table.store, "head", recording)
            return backlog_since(table, before, SENSOR, now=START + at)

    flush_one_row(uri, regions[0], 10**9)
    soon = read_at(second.watched, 75)  # due again 15 s after its last probe
    found = {b.region: b for b in soon.backlog.regions}[regions[0]]
    assert len(found.pending) == 1
    assert found.oldest_pending_created_at == START + 60
    assert not [p for p in dated if f"/{TABLE_VERSIONS_DIR}/" in p], dated

    flush_one_row(uri, regions[1], 10**9 + 1)
    late = read_at(soon.watched, 200)  # last probed 125 s before: dated by its files
    found = {b.region: b for b in late.backlog.regions}[regions[1]]
    assert found.pending and found.oldest_pending_created_at is not None
    assert found.oldest_pending_created_at > START + 10**6  # a modification time (this year), not a probe
    assert [p for p in dated if f"/{TABLE_VERSIONS_DIR}/" in p and regions[1] in p]
