"""Reads of a table whose region snapshot is old and whose regions keep many manifest versions.

GC keeps a week of region manifest versions, and the stored snapshot names the version
each region was at when it was built. Every read that starts from it (status, the sensor,
a merge's plan, metrics, the reader, the next snapshot) must cost about what it costs
with a fresh snapshot, not a request per version written since.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import wal_entry_name
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import Watched, backlog, backlog_since
from memwal_core.services.merge.plan import plan_merge
from memwal_core.services.reader import plan_read
from memwal_core.services.snapshot.plan import plan_snapshot
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status
from memwal_core.services.watch import TableWatch
from tests.support.tables import add_manifest_versions, independent_latest_manifest

VERSIONS = 300

READS: dict[str, Callable[[MemWalTable], Any]] = {
    "status": status,
    "backlog": backlog,
    "sensor tick": lambda t: backlog_since(t, Watched()),
    "merge plan": plan_merge,
    "reader": plan_read,
    "snapshot plan": plan_snapshot,
    "metrics": lambda t: TableWatch(t).read(),
}


def requests(uri: str, read: Callable[[MemWalTable], Any]) -> int:
    with MemWalTable.open(uri) as table:
        table.store.stats.reset()
        read(table)
        return table.store.stats.total()


@pytest.fixture(scope="module")
def stale(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    """A table whose snapshot was built before VERSIONS manifest versions per region; each read's
    requests then, and once the snapshot is built again."""
    uri = str(tmp_path_factory.mktemp("stale") / "t")
    write_demo_table(uri, base_rows=60, regions=3, rounds=2, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        build_snapshot(table)
    with MemWalTable.open(uri) as table:
        add_manifest_versions(table, VERSIONS)
    counts = {name: requests(uri, read) for name, read in READS.items()}
    with MemWalTable.open(uri) as table:
        build_snapshot(table)
    return uri, counts


@pytest.mark.parametrize("name", list(READS))
def test_a_stale_snapshot_costs_at_most_twice_a_fresh_one(
    stale: tuple[str, dict[str, int]], name: str
) -> None:
    uri, stale_counts = stale
    fresh = requests(uri, READS[name])
    assert stale_counts[name] <= 2 * fresh, f"{name}: {stale_counts[name]} requests, {fresh} when fresh"


def test_a_stale_snapshot_reads_the_latest_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=60, regions=2, rounds=2, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        build_snapshot(table)
    with MemWalTable.open(uri) as table:
        add_manifest_versions(table, 40)
        found = {r.region: r.manifest_version for r in status(table).regions}
    assert found == {r: independent_latest_manifest(tmp_path / "t", r).version for r in found}


def counted_snapshot_plan(uri: str) -> tuple[int, dict[str, int]]:
    """The requests of planning a snapshot, and the last WAL position it found per region."""
    with MemWalTable.open(uri) as table:
        table.store.stats.reset()
        plan = plan_snapshot(table)
        return table.store.stats.total(), {r.region: r.wal_entry_position_last_seen for r in plan.regions}


def test_wal_entries_past_the_writers_hint_cost_log_n(tmp_path: Path) -> None:
    """The snapshot probes for each region's last WAL entry past the position its manifest records
    (the writer records it only at a flush)."""
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=60, regions=2, rounds=2, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        build_snapshot(table)  # the manifests record the last WAL entries
        region = table.region_ids()[0]
    before, positions = counted_snapshot_plan(uri)
    wal = tmp_path / "t" / "_mem_wal" / region / "wal"
    last = positions[region]
    for position in range(last + 1, last + 1 + VERSIONS):
        shutil.copy(wal / wal_entry_name(last), wal / wal_entry_name(position))
    after, positions = counted_snapshot_plan(uri)
    assert positions[region] == last + VERSIONS
    assert after - before <= 2 * math.log2(VERSIONS) + 4, (
        f"{after - before} more requests for {VERSIONS} entries"
    )
