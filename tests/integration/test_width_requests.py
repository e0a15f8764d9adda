"""Storage requests per region on S3, counted by a proxy in front of SeaweedFS.

On a store with ~20 ms per request, a command's time at width is its
requests per region; these pin the bounds (status, gc, merge, the sensor
tick, an idle table's ticks and exporter reads over an hour), and that a
stale version hint never gives a wrong answer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from dagster import AssetObservation, DagsterInstance, SensorResult, build_sensor_context

from memwal_core.format.naming import MEM_WAL_DIR, REGION_MANIFEST_DIR, VERSION_HINT_FILE
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import Watched, backlog, backlog_after, backlog_since
from memwal_core.services.backoff import Backoff, Clock
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.plan import POLLED_CURRENT_SECONDS
from memwal_core.services.merge.service import merge
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status
from memwal_core.services.watch import TableWatch
from memwal_core.storage.options import StorageOptions
from memwal_pipelines import resources
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig
from memwal_pipelines.freshness import probe_backoff
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import (
    CATCHUP_SENSOR,
    COMPACTION_SENSOR,
    FLUSHED_SENSOR,
    FlushedTick,
    flushed_tick,
)
from tests.support.proxy import LatencyProxy
from tests.support.tables import add_manifest_versions

REGIONS = 12
# Plan (2), the lease (LIST, PUT to take it; a committed region gives nothing back), Lance opening
# the generation (3).
MERGE_REQUESTS = 7
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
    ]
)


@pytest.fixture
def proxy(seaweed: Any) -> Iterator[LatencyProxy]:
    with LatencyProxy(seaweed.ports["s3.port"]) as counting:
        yield counting


def put_region(uri: str, options: dict[str, str], region: str, keys: np.ndarray) -> None:
    """One flushed generation of `keys` in `region`, through Lance's own writer."""
    with lance.dataset(uri, storage_options=options).mem_wal_writer(
        region, max_memtable_rows=10_000
    ) as writer:
        writer.put(pa.table({"id": keys, "n": keys * 10 + 1}, schema=SCHEMA))


def wide_table(options: dict[str, str]) -> tuple[str, list[str]]:
    """A small base table and REGIONS regions of one generation each."""
    uri = f"s3://memwal-test/width/{uuid.uuid4().hex}"
    ids = np.arange(1000, dtype=np.int64)
    dataset = lance.write_dataset(
        pa.table({"id": ids, "n": ids}, schema=SCHEMA), uri, storage_options=options
    )
    dataset.initialize_mem_wal()
    regions = [str(uuid.uuid4()) for _ in range(REGIONS)]
    for number, region in enumerate(regions):
        put_region(uri, options, region, ids[number::REGIONS][:20])
    return uri, regions


def per_region(proxy: LatencyProxy, regions: list[str]) -> float:
    """Requests since the last reset that named a region (its objects, its lease), per region."""
    return proxy.naming(regions) / len(regions)


def counted(
    proxy: LatencyProxy, uri: str, options: dict[str, str], regions: list[str], run: Any
) -> tuple[float, Any]:
    """Requests per region `run(table)` makes through the proxy, and its result."""
    proxy.reset()
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        result = run(table)
    return per_region(proxy, regions), result


def width_config(uri: str) -> TableConfig:
    return TableConfig(name="wide", uri=uri, storage_options_env="WIDTH_TEST_OPTIONS")


def tick(uri: str, options: dict[str, str], instance: DagsterInstance, cursor: str | None) -> SensorResult:
    definitions = build_definitions([width_config(uri)])
    sensor = definitions.resolve_sensor_def(FLUSHED_SENSOR)
    with build_sensor_context(instance=instance, cursor=cursor, resources=definitions.resources) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    return result


def test_requests_per_region_of_status_gc_merge(seaweed: Any, proxy: LatencyProxy) -> None:
    uri, regions = wide_table(seaweed.storage_options())
    options = proxy.storage_options(seaweed.storage_options())
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        build_snapshot(table)

    requests, found = counted(proxy, uri, options, regions, status)
    assert found.pending_total == REGIONS
    # The snapshot's versions are current: one HEAD and the manifest per region.
    assert requests == 2, f"status: {requests} requests per region"

    requests, report = counted(proxy, uri, options, regions, lambda t: gc(t, dry_run=True))
    assert not report.failures and len(report.plan.regions) == REGIONS
    # One LIST of the region, one HEAD past its newest manifest, the manifest.
    assert requests == 4, f"gc --dry-run: {requests} requests per region"

    requests, merged = counted(proxy, uri, options, regions, merge)
    assert not merged.failures and merged.generations_merged == REGIONS
    assert requests <= MERGE_REQUESTS, f"merge: {requests} requests per region"

    # Nothing left to merge: every stale snapshot hint is still verified and the answer is right.
    again = status(MemWalTable.open(uri, StorageOptions(options)))
    assert again.pending_total == 0
    assert {r.region for r in again.regions} == set(regions)


def test_a_merge_round_observes_the_regions_it_caught_up_for_no_request(
    seaweed: Any, proxy: LatencyProxy
) -> None:
    """What a merge run records of each region after its round (the UI's backlog view) is what the
    round planned and merged: a region it caught up costs no request (a flush since is the sensor's
    to see, whose next read probes the region anyway); one with generations left is read again."""
    uri, regions = wide_table(seaweed.storage_options())
    behind = regions[5]
    put_region(uri, seaweed.storage_options(), behind, np.arange(9000, 9010, dtype=np.int64))
    options = proxy.storage_options(seaweed.storage_options())
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        merged = merge(table, max_generations=1)
    assert not merged.failures and merged.generations_merged == REGIONS
    readings = merged.planned_readings()
    assert sorted(readings) == sorted(regions)
    assert merged.merged_through() == dict.fromkeys(regions, 1)

    proxy.reset()
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        after = backlog_after(table, merged.version_after, readings, merged.merged_through())
    caught_up = [r for r in regions if r != behind]
    assert proxy.naming(caught_up) == 0, f"{proxy.naming(caught_up)} requests for the regions caught up"
    # The region left behind: a HEAD of its next version, its manifest, and the HEAD dating generation 2.
    assert proxy.naming([behind]) == 3, proxy.lines
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        assert after.regions == backlog(table).regions
    assert [r.pending for r in after.regions if r.region == behind] == [(2,)]


def test_a_round_its_sensor_asked_for_reads_each_region_manifest_once(
    seaweed: Any, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round run moments after its sensor's tick, as Dagster runs it: each region's manifest is read
    at the version the tick saw (one GET; no HEAD of the next version), and the run observes the
    regions it caught up from what it merged (no HEAD after the round)."""
    uri, regions = wide_table(seaweed.storage_options())
    options = proxy.storage_options(seaweed.storage_options())
    monkeypatch.setenv("WIDTH_TEST_OPTIONS", json.dumps(options))
    instance = DagsterInstance.ephemeral()
    found = tick(uri, options, instance, None)
    for added in found.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(added.partitions_def_name, list(added.partition_keys or []))
    (request,) = found.run_requests or []

    proxy.reset()
    run = (
        build_definitions([width_config(uri)])
        .resolve_job_def("wide_merge")
        .execute_in_process(instance=instance, tags=request.tags, run_config=request.run_config)
    )
    assert run.success
    manifests = [
        line.split(" ", 1)[0]
        for line in proxy.lines
        if f"/{REGION_MANIFEST_DIR}/" in line and any(r in line for r in regions)
    ]
    assert manifests == ["GET"] * REGIONS, f"the round's region manifest requests: {sorted(manifests)}"
    assert per_region(proxy, regions) <= MERGE_REQUESTS - 1
    observed = [e.partition for e in run.get_asset_observation_events()]
    assert sorted(p for p in observed if p) == sorted(regions)


def test_a_stale_snapshot_costs_at_most_twice_a_fresh_one(seaweed: Any, proxy: LatencyProxy) -> None:
    """Manifest versions written since the snapshot (a week of them, kept by GC) cost the version
    hint and one more HEAD per region, not a HEAD per version."""
    uri, regions = wide_table(seaweed.storage_options())
    options = proxy.storage_options(seaweed.storage_options())
    with MemWalTable.open(uri, StorageOptions(seaweed.storage_options())) as table:
        build_snapshot(table)
        add_manifest_versions(table, 30)
        listed = {r: max(table.region_store(r).stored_versions()) for r in regions}
    requests, found = counted(proxy, uri, options, regions, status)
    assert requests == 4, f"status with a stale snapshot: {requests} requests per region"
    assert {r.region: r.manifest_version for r in found.regions} == listed


def test_a_merge_round_reads_each_region_from_the_version_its_sensor_saw(
    seaweed: Any, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a writer the region snapshot is minutes old: every flush and claim writes manifest
    versions after it, and a round reading from the snapshot paid the version hint and one more HEAD
    per region. The sensor's round carries the version it just read of each pending region, and
    when it saw them current: the round starts there, and reads each as it is (its manifest alone)
    while that was moments ago, else verifies it (a HEAD and the manifest, as with a fresh
    snapshot). A version that is no longer right (too new: a table made again) still plans what is
    stored."""
    uri, regions = wide_table(seaweed.storage_options())
    options = proxy.storage_options(seaweed.storage_options())
    monkeypatch.setenv("WIDTH_TEST_OPTIONS", json.dumps(options))
    with MemWalTable.open(uri, StorageOptions(seaweed.storage_options())) as table:
        build_snapshot(table)
        add_manifest_versions(table, 3)
        latest = {r: max(table.region_store(r).stored_versions()) for r in regions}
    before = time.time()
    (request,) = tick(uri, options, DagsterInstance.ephemeral(), None).run_requests or []
    config = request.run_config["ops"]["wide__base_table"]["config"]
    assert config["manifest_versions"] == latest
    polled_at = config["polled_at"]
    assert before <= polled_at <= time.time()

    def planned(result: Any) -> dict[str, tuple[int, ...]]:
        return {p.region: tuple(g.generation for g in p.generations) for p in result.plan.regions}

    def from_sensor(at: float | None) -> Any:
        return lambda t: merge(t, dry_run=True, manifest_versions=latest, polled_at=at)

    stale, from_snapshot = counted(proxy, uri, options, regions, lambda t: merge(t, dry_run=True))
    verified, _ = counted(proxy, uri, options, regions, from_sensor(polled_at - 2 * POLLED_CURRENT_SECONDS))
    seen, as_seen = counted(proxy, uri, options, regions, from_sensor(polled_at))
    assert (stale, verified, seen) == (4, 2, 1), (
        f"planning from the snapshot {stale}, from the sensor's versions {verified}, just seen {seen}"
    )
    assert planned(as_seen) == planned(from_snapshot) == {r: (1,) for r in regions}
    wrong = {r: v + 100 for r, v in latest.items()}
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        merged = merge(table, manifest_versions=wrong, polled_at=time.time())
    assert not merged.failures and merged.generations_merged == REGIONS


def test_a_stale_hint_never_gives_a_wrong_answer(seaweed: Any, proxy: LatencyProxy) -> None:
    options = seaweed.storage_options()
    uri, regions = wide_table(options)
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        build_snapshot(table)
        snapshot_versions = {r.region: r.manifest_version for r in status(table).regions}
    # After the snapshot: a second generation in one region (a newer manifest version) ...
    moved = regions[0]
    put_region(uri, options, moved, np.arange(5000, 5010, dtype=np.int64))
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        # ... and version hint files that lie (GC may leave one behind; the writer may not have updated it).
        for region in regions[1:3]:
            table.store.write(
                f"{MEM_WAL_DIR}/{region}/{REGION_MANIFEST_DIR}/{VERSION_HINT_FILE}", b'{"version":1}'
            )
        found = {r.region: r for r in status(table).regions}
        truth = {r: table.region_store(r).read_latest() for r in regions}
        assert found[moved].manifest_version > snapshot_versions[moved]
        assert found[moved].flushed_generations == [1, 2] and found[moved].pending_generations == [1, 2]
        for region in regions:
            assert found[region].manifest_version == truth[region].version
        # Hints that name a version long gone, one never written, and a far older one.
        known: dict[str, int] = {regions[0]: 1, regions[1]: 10_000, regions[2]: 0}
        read = table.read_regions(known=known)
        assert {r: m.version for r, m in read.items() if m} == {r: m.version for r, m in truth.items()}
        # GC of old manifest versions leaves the first version gone: a hint naming it still finds the latest.
        gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0, keep_manifest_versions=1))
        latest = table.read_regions(known={moved: 1})[moved]
        assert latest is not None and latest.generation_numbers == truth[moved].generation_numbers


def test_sensor_tick_reads_only_what_changed(
    seaweed: Any, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, regions = wide_table(seaweed.storage_options())
    options = proxy.storage_options(seaweed.storage_options())
    monkeypatch.setenv("WIDTH_TEST_OPTIONS", json.dumps(options))
    instance = DagsterInstance.ephemeral()
    first = tick(uri, options, instance, None)
    observed = [e.partition for e in first.asset_events if isinstance(e, AssetObservation)]
    assert sorted(p for p in observed if p) == sorted(regions)
    # Each region's oldest pending generation is dated by a HEAD of its first manifest, not a LIST.
    dated = [line.split(" ", 1)[0] for line in proxy.lines if "_gen_" in line]
    assert dated == ["HEAD"] * REGIONS, dated

    proxy.reset()
    quiet = tick(uri, options, instance, first.cursor)
    # One HEAD per region (no newer manifest version).
    assert per_region(proxy, regions) == 1, f"sensor tick: {per_region(proxy, regions)} requests per region"
    assert not [e for e in quiet.asset_events if isinstance(e, AssetObservation)]

    moved = regions[3]
    put_region(uri, seaweed.storage_options(), moved, np.arange(7000, 7010, dtype=np.int64))
    proxy.reset()
    changed = tick(uri, options, instance, quiet.cursor)
    # The moved region: the HEAD that found its next version, its version hint, and the manifest the
    # hint names (before: one HEAD past it too). Its oldest pending generation is the one the last
    # reading dated, so no LIST dates it again (before: that LIST, and before that the first HEAD twice).
    assert proxy.naming([moved]) == 3, "\n".join(
        line[:50] + line[-70:] for line in proxy.lines if moved in line
    )
    events = [e for e in changed.asset_events if isinstance(e, AssetObservation)]
    assert [e.partition for e in events] == [moved]
    assert events[0].metadata["latest_flushed_generation"].value == 2
    assert events[0].metadata["pending_generations"].value == 2
    first_seen = next(
        e for e in first.asset_events if isinstance(e, AssetObservation) and e.partition == moved
    )
    assert (
        events[0].metadata["oldest_pending_age_seconds"].value
        >= first_seen.metadata["oldest_pending_age_seconds"].value
    ), "dated from its oldest pending generation's flush, not from this read"

    # Once merged, no region is read again: one HEAD each proves its manifest unchanged (before: its
    # manifest read again, a HEAD and a GET a region).
    with MemWalTable.open(uri, StorageOptions(seaweed.storage_options())) as table:
        assert not merge(table).failures
    proxy.reset()
    after = tick(uri, options, instance, changed.cursor)
    assert per_region(proxy, regions) == 1, proxy.lines
    events = [e for e in after.asset_events if isinstance(e, AssetObservation)]
    assert sorted(e.partition or "" for e in events) == sorted(regions)
    assert {e.metadata["pending_generations"].value for e in events} == {0}
    assert {e.partition: e.metadata["merged_generation"].value for e in events}[moved] == 2


# An idle table's requests are counted over an hour of ticks in simulated time; the figures are the
# aims at default settings (docs/pipeline.md): a quiet region probed about every 220 s by the sensor
# (5 s ticks, a bound of 900 s / 4: once per 220 s window, at its phase) and every 435 s by the
# exporter (15 s reads, a bound of 450 s).
SIMULATED = 3600.0
SENSOR_PER_REGION_MINUTE = 0.3
EXPORTER_PER_REGION_MINUTE = 0.15


def idle_table(seaweed: Any) -> tuple[str, list[str], dict[str, str]]:
    """`wide_table` with every region merged (nothing pending), and its storage options (no proxy)."""
    uri, regions = wide_table(seaweed.storage_options())
    with MemWalTable.open(uri, StorageOptions(seaweed.storage_options())) as table:
        assert not merge(table).failures
    return uri, regions, seaweed.storage_options()


def per_minute(proxy: LatencyProxy, regions: list[str], seconds: float) -> tuple[float, float]:
    """Requests since the last reset per region a minute, and the table's own (naming no region) a minute."""
    region = proxy.naming(regions)
    return region / len(regions) * 60 / seconds, (proxy.total() - region) * 60 / seconds


def test_an_idle_table_costs_the_sensor_half_a_request_per_region_a_minute(
    seaweed: Any, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, regions, direct = idle_table(seaweed)
    options = proxy.storage_options(direct)
    monkeypatch.setenv("WIDTH_TEST_OPTIONS", json.dumps(options))
    keys = TableKeys(TableConfig(name="wide", uri=uri, storage_options_env="WIDTH_TEST_OPTIONS"))
    backoff = probe_backoff(keys.table)
    definitions = build_definitions([keys.table])
    instance = DagsterInstance.ephemeral()
    moved = regions[5]
    start = time.time()
    with build_sensor_context(instance=instance, resources=definitions.resources) as context:

        def tick_at(cursor: str | None, now: float) -> FlushedTick:
            return flushed_tick(context, keys, cursor, queued=False, now=now)

        def ticks(cursor: str, first: float, last: float) -> str:
            """Ticks from `first` to `last` (simulated time), each with the cursor the one before left."""
            while first <= last:
                cursor = tick_at(cursor, first).cursor.dump()
                first += backoff.tick
            return cursor

        cursor = ticks(tick_at(None, start).cursor.dump(), start + backoff.tick, start + SIMULATED / 2)
        proxy.reset()
        cursor = ticks(cursor, start + SIMULATED / 2 + backoff.tick, start + SIMULATED)
        region, table = per_minute(proxy, regions, SIMULATED / 2)
        # Before backoff: one HEAD per region every tick (12 a minute), and a LIST of `_versions/` and
        # one of `_mem_wal/` every tick (24 a minute).
        assert region <= SENSOR_PER_REGION_MINUTE, f"{region:.2f} requests per region a minute"
        assert table <= 2 * SENSOR_PER_REGION_MINUTE, f"{table:.2f} table requests a minute"

        # The worst case: a flush on a long-quiet region just after its probe.
        now = start + SIMULATED
        while json.loads(cursor)["clocks"][moved][1] != now:
            now += backoff.tick
            cursor = tick_at(cursor, now).cursor.dump()
        put_region(uri, direct, moved, np.arange(9000, 9010, dtype=np.int64))
        probed = now

        # A restart: a new process (no table open) ticking with the stored cursor keeps backing off: the
        # region probed a tick ago is not probed again, and of the others only those whose phase falls on
        # this tick are (a restart that lost the clocks would probe all of them).
        monkeypatch.setattr(resources, "_SENSOR_TABLES", {})
        clocks = json.loads(cursor)["clocks"]
        proxy.reset()
        now += backoff.tick
        due = [r for r in regions if backoff.due(Clock.from_list(clocks[r]), now, r)]
        cursor = tick_at(cursor, now).cursor.dump()
        assert moved not in due and proxy.naming(regions) == len(due), proxy.lines

        # The flush is seen, and its merge round requested, within the bound.
        while True:
            now += backoff.tick
            assert now - probed <= backoff.bound, "the flush was not seen within the bound"
            found = tick_at(cursor, now)
            cursor = found.cursor.dump()
            if any(isinstance(e, AssetObservation) and e.partition == moved for e in found.events):
                break
        assert found.round is not None, "its merge round is requested in the same tick"

        # A cursor from before backoff (no clocks, no table version) still loads: every region is probed.
        older = {k: v for k, v in json.loads(cursor).items() if k not in ("clocks", "version")}
        proxy.reset()
        tick_at(json.dumps(older), now + backoff.tick)
        assert per_region(proxy, regions) == 1


def test_an_idle_table_costs_the_exporter_a_request_per_region_every_seven_minutes(
    seaweed: Any, proxy: LatencyProxy
) -> None:
    uri, regions, direct = idle_table(seaweed)
    # `memwal metrics --listen` at its defaults: a read every 15 s, a bound of half the 900 s threshold.
    backoff = Backoff(tick=15.0, bound=450.0)
    moved = regions[7]
    start = time.time()
    with MemWalTable.open(uri, StorageOptions(proxy.storage_options(direct))) as table:
        watch = TableWatch(table, backoff)

        def reads(first: float, last: float) -> None:
            while first <= last:
                watch.read(now=first)
                first += backoff.tick

        before = watch.read(now=start)
        reads(start + backoff.tick, start + SIMULATED / 2)
        proxy.reset()
        reads(start + SIMULATED / 2 + backoff.tick, start + SIMULATED)
        region, per_table = per_minute(proxy, regions, SIMULATED / 2)
        # Before backoff: one HEAD per region every read (4 a minute), and per read the version listing,
        # the region listing, three outcome records and the oldest version's HEAD (24 a minute).
        assert region <= EXPORTER_PER_REGION_MINUTE, f"{region:.2f} requests per region a minute"
        # The next version's HEAD at least once a minute (a read a tick early: 1.3 a minute; before,
        # every read: 4 a minute, 4.8 in all), the rest at the bound.
        assert per_table <= 2.5, f"{per_table:.2f} table requests a minute"

        # The worst case again: a flush just after the regions' probe shows within the bound, and
        # until then every region keeps its reading.
        now = start + SIMULATED
        proxy.reset()
        while not proxy.naming(regions):
            now += backoff.tick
            watch.read(now=now)
        put_region(uri, direct, moved, np.arange(9000, 9010, dtype=np.int64))
        probed = now
        while True:
            now += backoff.tick
            assert now - probed <= backoff.bound, "the flush was not seen within the bound"
            reading = watch.read(now=now)
            (seen,) = [r.backlog for r in reading.regions if r.region == moved]
            if seen.pending:
                break
            assert [r.backlog for r in reading.regions] == [r.backlog for r in before.regions]
        assert seen.pending == (2,)
        # Its lag grows with the time it is served at, without another read.
        assert seen.oldest_pending_age(now + 60) == pytest.approx(seen.oldest_pending_age(now) + 60)


@pytest.mark.parametrize("name", [CATCHUP_SENSOR, COMPACTION_SENSOR])
def test_an_unchanged_tables_catchup_and_compaction_ticks_cost_one_head_then_back_off(
    seaweed: Any, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    uri, _regions, direct = idle_table(seaweed)
    monkeypatch.setenv("WIDTH_TEST_OPTIONS", json.dumps(proxy.storage_options(direct)))
    definitions = build_definitions(
        [TableConfig(name="wide", uri=uri, storage_options_env="WIDTH_TEST_OPTIONS")]
    )
    sensor = definitions.resolve_sensor_def(name)
    cursor = None
    with DagsterInstance.ephemeral() as instance:
        for _ in range(3):  # the first tick reads the table; the others find its version unchanged
            proxy.reset()
            with build_sensor_context(
                instance=instance, cursor=cursor, resources=definitions.resources
            ) as context:
                result = sensor(context)
            assert isinstance(result, SensorResult)
            cursor = result.cursor
        # Before: Lance's open of the latest version, a listing of `_versions/` and more, every tick.
        assert proxy.counts == {"HEAD": 1}, proxy.lines

        def quiet_tick(changed_ago: float, probed_ago: float) -> dict[str, int]:
            """A tick over a table unchanged for `changed_ago` seconds, last probed `probed_ago` ago."""
            seen = json.loads(json.loads(cursor or "{}")["wide"])
            now = time.time()
            seen["clock"] = [now - changed_ago, now - probed_ago]
            proxy.reset()
            quiet = json.dumps({"wide": json.dumps(seen)})
            with build_sensor_context(
                instance=instance, cursor=quiet, resources=definitions.resources
            ) as context:
                sensor(context)
            return dict(proxy.counts)

        # Quiet for 5 minutes: probed every quarter of that (75 s), a tick early, not every tick (30 s
        # for catch-up, 60 s for compaction). Quiet for an hour: at least every quarter of 900 s.
        assert quiet_tick(changed_ago=300, probed_ago=5) == {}
        assert quiet_tick(changed_ago=3600, probed_ago=200) == {"HEAD": 1}


def test_a_busy_tables_exporter_reads_the_merges_record_on_every_read_and_the_others_at_the_bound(
    seaweed: Any, proxy: LatencyProxy
) -> None:
    uri, _regions = wide_table(seaweed.storage_options())  # nothing merged: generations pending
    backoff = Backoff(tick=15.0, bound=450.0)
    start = time.time()
    with MemWalTable.open(uri, StorageOptions(proxy.storage_options(seaweed.storage_options()))) as table:
        watch = TableWatch(table, backoff)
        now = start
        while now < start + 600:  # ten minutes of reads: the records are due every 150 s by then
            watch.read(now=now)
            now += backoff.tick
        proxy.reset()
        for n in range(4):  # a minute of reads
            watch.read(now=now + n * backoff.tick)
        records = [line.split()[1].rsplit("/", 1)[1] for line in proxy.lines if "_memwal_outcomes/" in line]
        # Before: every record (merge, gc, snapshot, catch-up) on every read while generations are pending.
        assert records.count("merge.json") >= 4 and len(records) <= 4 + 4, records


def test_a_burst_on_a_quiet_table_is_seen_whole_at_its_first_probe(seaweed: Any) -> None:
    """Quiet regions are probed at their own phases, a few each tick; the tick whose probe meets the
    first flush of a burst probes every other region of the table too, and so sees the whole burst."""
    uri, regions, direct = idle_table(seaweed)
    backoff = Backoff(tick=5.0, bound=900 / 8)
    start = time.time()
    with MemWalTable.open(uri, StorageOptions(direct)) as table:
        watched = backlog_since(table, Watched(), backoff, now=start).watched
        now = start
        while now < start + 1800:  # half an hour quiet: every region probed at its phase
            now += backoff.tick
            watched = backlog_since(table, watched, backoff, now=now).watched
        for n, region in enumerate(regions):
            put_region(uri, direct, region, np.arange(20_000 + 10 * n, 20_010 + 10 * n, dtype=np.int64))
        flushed = now
        while True:
            now += backoff.tick
            # 16 regions' phases leave gaps of about 7 s on average in a 107.5 s window.
            assert now - flushed <= backoff.bound / 2, "the burst was not seen within half the bound"
            found = backlog_since(table, watched, backoff, now=now)
            watched = found.watched
            seen = [r.region for r in found.backlog.regions if r.pending]
            if seen:
                break
    # Before: every region in lock-step, once per 110 s (this burst: 70 s after the flushes).
    assert sorted(seen) == sorted(regions)
