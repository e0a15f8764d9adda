"""GC's cost does not grow with the manifest versions it keeps (issue 46).

A region keeps a week of manifest versions (the fence retention): ~15,000 at a flush every 40 s.
GC listed them all on every run, to find the oldest and the anchor (the newest written more than
the retention ago): a stat each on local disk, a LIST page per 1,000 on S3. It now finds the
oldest by HEADs (two, from the one its last run recorded) and the anchor by bisection over the
versions' times. These plan a region of 2,000 versions, aged one a minute, count what the plan
reads of them, and check its decisions against those a full listing gives.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

from memwal_core.format.naming import MEM_WAL_DIR, OLDEST_MANIFESTS_FILE, REGION_MANIFEST_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.plan import RegionGcPlan, RegionListing, plan_gc
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import execute_gc
from memwal_core.services.merge.service import merge
from tests.integration.test_gc import new_table, write_generations
from tests.integration.test_gc_kept_wal import FileSystemCalls
from tests.support.proxy import LatencyProxy
from tests.support.tables import add_manifest_versions

VERSIONS = 2000
GRACE = 3600.0
# Only the fence retention (and the grace period) keeps a version: the newest one is kept anyway.
POLICY = GcPolicy(grace_seconds=GRACE, keep_manifest_versions=1)
RETENTION = POLICY.fence_retention_seconds
# A plan's reads of versions: the oldest (two HEADs) and the anchor (a bisection), the grace
# period's version (a bisection), with a little slack; a listing reads every version.
LOG_BOUND = 2 * math.log2(VERSIONS) + 6


@dataclass(frozen=True)
class Listed:
    """A region's manifest versions from one full listing (version -> time), and what GC decides from them."""

    times: dict[int, float]
    # The version that pruned the generations whose directories are still there (None: none are).
    pruned_in: int | None

    def expected(self, table: MemWalTable, region: str, now: float) -> dict[str, Any]:
        """The plan's decisions on versions and WAL, from the definitions: the anchor is the newest
        version older than the retention; the versions below it go, but not the newest one nor any
        from the one a running grace period is timed from; the WAL goes from the oldest version's
        replay position to the anchor's."""
        oldest, latest = min(self.times), max(self.times)
        anchor = max((v for v, t in self.times.items() if now - t > RETENTION), default=None)
        grace_running = self.pruned_in is not None and now - self.times[self.pruned_in] < GRACE
        others = min([latest, *([self.pruned_in] if self.pruned_in and grace_running else [])])
        cutoff = min(others, anchor or 0)
        replay = lambda v: table.region_store(region).read(v).replay_after_wal_entry_position  # noqa: E731
        wal = range(0)
        if anchor is not None:
            end = replay(anchor) + 1
            start = replay(oldest) + 1 if oldest != anchor else end
            wal = range(start, max(start, end))
        return {
            "oldest": oldest,
            "manifest_delete": tuple(range(oldest, cutoff)),
            "manifest_kept": len(range(max(cutoff, oldest), others)),
            "wal_delete": wal,
            "dirs_deleted": self.pruned_in is not None and not grace_running,
        }


def decided(plan: RegionGcPlan) -> dict[str, Any]:
    return {
        "oldest": plan.manifest_oldest,
        "manifest_delete": plan.manifest_delete,
        "manifest_kept": plan.manifest_kept,
        "wal_delete": plan.wal_delete,
        "dirs_deleted": bool(plan.delete_dirs),
    }


def region_of_many_versions(uri: str, options: dict[str, str] | None = None) -> tuple[str, int]:
    """A region whose two merged generations GC pruned (their directories kept for the grace period),
    then VERSIONS more manifest versions; the version that pruned them."""
    model = new_table(uri, options)
    region = write_generations(model, None, 2, 1)
    with MemWalTable.open(uri, options) as table:
        merge(table)
    # Lance's cleanup: no older base version keeps the generations for time travel.
    lance.dataset(uri, storage_options=options).cleanup_old_versions(older_than=timedelta(0))
    with MemWalTable.open(uri, options) as table:
        done = execute_gc(table, plan_gc(table, POLICY), dry_run=False)
        (pruned_in,) = [o.pruned_in_version for o in done.outcomes]
        assert pruned_in is not None
        add_manifest_versions(table, VERSIONS)
    return region, pruned_in


def listing(uri: str, region: str, pruned_in: int | None, options: dict[str, str] | None = None) -> Listed:
    with MemWalTable.open(uri, options) as table:
        return Listed(table.region_store(region).stored_versions(), pruned_in)


def age_one_a_minute(uri: str, region: str) -> None:
    """Version v written at BASE + v minutes, the newest a minute ago; the generation files before them all."""
    region_dir = Path(uri) / MEM_WAL_DIR / region
    files = [p for p in (region_dir / REGION_MANIFEST_DIR).glob("*.binpb")]
    latest = max(int(p.name[:64][::-1], 2) for p in files)
    base = time.time() - 60.0 * (latest + 1)
    for path in files:
        at = base + 60.0 * int(path.name[:64][::-1], 2)
        os.utime(path, (at, at))
    for path in region_dir.glob("*_gen_*/**/*"):
        os.utime(path, (base, base))


def scenarios(listed: Listed) -> dict[str, float]:
    """Plan times: nothing old and the grace period running; the anchor at the oldest version, in the
    middle, just below the newest, at the newest."""
    t = listed.times
    oldest, latest = min(t), max(t)
    assert listed.pruned_in is not None
    return {
        "young": t[listed.pruned_in] + GRACE / 2,
        "oldest": t[oldest] + RETENTION + 30,
        "middle": t[oldest + 777] + RETENTION + 30,
        "below newest": t[latest - 1] + RETENTION + 30,
        "newest": t[latest] + RETENTION + 30,
    }


def test_a_plan_stats_log_n_of_the_versions_it_keeps_and_decides_as_a_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    region, pruned_in = region_of_many_versions(uri)
    age_one_a_minute(uri, region)
    listed = listing(uri, region, pruned_in)
    manifest_dir = Path(uri) / MEM_WAL_DIR / region / REGION_MANIFEST_DIR
    calls = FileSystemCalls(monkeypatch)
    with MemWalTable.open(uri) as table:
        for name, now in scenarios(listed).items():
            calls.clear()
            (plan,) = plan_gc(table, POLICY, now=now).regions
            assert decided(plan) == listed.expected(table, region, now), name
            stats = calls.stats_in(manifest_dir)
            assert len(stats) <= LOG_BOUND, f"{name}: {len(stats)} versions stat'ed"
            assert calls.reads_in(manifest_dir) == [], f"{name}: the manifest folder was listed"


def test_the_oldest_version_recorded_costs_two_heads_and_a_wrong_record_costs_a_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    region, pruned_in = region_of_many_versions(uri)
    age_one_a_minute(uri, region)
    middle = scenarios(listing(uri, region, pruned_in))["middle"]
    with MemWalTable.open(uri) as table:
        done = execute_gc(table, plan_gc(table, POLICY, now=middle), dry_run=False)
        assert not done.failures and done.to_json()["manifest_versions_deleted"] > 0
        assert sorted(d.generation for d in done.deleted) == [1, 2]
    listed = listing(uri, region, None)
    assert json.loads((Path(uri) / OLDEST_MANIFESTS_FILE).read_text()) == {
        "regions": {region: min(listed.times)}
    }

    calls = FileSystemCalls(monkeypatch)
    manifest_dir = Path(uri) / MEM_WAL_DIR / region / REGION_MANIFEST_DIR
    later = middle + 600
    oldest = min(listed.times)
    for record in ({region: oldest}, {region: 5}, {region: oldest + 500}, {"garbled": "x"}):
        (Path(uri) / OLDEST_MANIFESTS_FILE).write_text(json.dumps({"regions": record}))
        calls.clear()
        with MemWalTable.open(uri) as table:
            (plan,) = plan_gc(table, POLICY, now=later).regions
            assert decided(plan) == listed.expected(table, region, later), record
        assert len(calls.stats_in(manifest_dir)) <= LOG_BOUND + 2, record
        if record == {region: oldest}:
            oldest_heads = [
                p for p in calls.stats_in(manifest_dir) if int(Path(p).name[:64][::-1], 2) < oldest
            ]
            assert len(oldest_heads) == 1, "the recorded oldest: it and the one before"


@pytest.fixture
def proxy(seaweed: Any) -> Any:
    with LatencyProxy(seaweed.ports["s3.port"]) as counting:
        yield counting


def test_on_s3_a_plan_reads_no_page_of_manifest_versions(seaweed: Any, proxy: LatencyProxy) -> None:
    """One LIST page (the generation directories, and a sample of the versions: every stored multiple
    of a step, their names being their bits reversed), a few HEADs; the same decisions as a listing,
    with S3's own times (whole seconds, non-decreasing with the version)."""
    options = seaweed.storage_options()
    uri = f"s3://memwal-test/kept-versions-{uuid.uuid4().hex}"
    region, pruned_in = region_of_many_versions(uri, options)
    listed = listing(uri, region, pruned_in, options)
    times = sorted(set(listed.times.values()))
    assert [listed.times[v] for v in sorted(listed.times)] == sorted(listed.times.values())
    # Before the retention, at a second in the middle of the writes, after all of them.
    nows = [times[0] + 60, times[len(times) // 2] + RETENTION + 0.5, times[-1] + RETENTION + 1]
    heads: list[int] = []
    for now in nows:
        proxy.reset()
        with MemWalTable.open(uri, proxy.storage_options(options)) as table:
            (plan,) = plan_gc(table, POLICY, now=now).regions
            lines = [line for line in proxy.lines if region in line]
            assert decided(plan) == listed.expected(table, region, now), now
        lists = [line for line in lines if "list-type=2" in line]
        assert len(lists) == 1, lists
        assert len(lines) <= LOG_BOUND + 12, f"{len(lines)} requests: {proxy.counts}"
        heads.append(sum(1 for line in lines if line.startswith("HEAD ")))

    with MemWalTable.open(uri, options) as table:
        page = RegionListing.read(table.store, region, wal_scan_at=None)
    step = page.versions_every
    assert step is not None and 1 < step <= 8, "a page of about 1,000 of 2,000 versions"
    assert {v for v in listed.times if v % step == 0} <= set(page.manifest_versions)
    assert max(heads) <= 4 + 2 * math.log2(step), f"{heads} HEADs"
