"""The region snapshot: contents against the manifests, inline and file storage, and its safety."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileReader
from lance.mem_wal import CompactedSsTable, evaluate_sharding_spec

from memwal_core.cli.main import main
from memwal_core.demo import DEMO_SCHEMA, write_demo_table
from memwal_core.format.naming import REGION_VERSIONS_FILE, parse_bitrev64, wal_entry_name
from memwal_core.format.region_snapshot import RegionSnapshotRow
from memwal_core.model.details_commit import (
    progress_regressions,
    repair_progress,
    rewrite_details,
)
from memwal_core.model.details_lease import details_lease
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.service import merge
from memwal_core.services.snapshot.service import SnapshotResult, build_snapshot
from memwal_core.services.snapshot.stored import read_stored_snapshot, snapshot_hints
from memwal_core.services.status import status
from tests.support.regions import write_regions
from tests.support.tables import (
    assert_progress_never_decreases,
    independent_latest_manifest,
    progress_history,
)


def wal_positions(table_dir: Path, region: str) -> list[int]:
    wal = table_dir / "_mem_wal" / region / "wal"
    return sorted(parse_bitrev64(name[:64]) for name in os.listdir(wal))


def assert_row_matches_manifest(row: RegionSnapshotRow, table_dir: Path, merged: int) -> None:
    manifest = independent_latest_manifest(table_dir, row.region)
    assert row.version == manifest.version
    assert row.writer_epoch == manifest.writer_epoch
    assert row.spec_id == manifest.shard_spec_id
    assert row.replay_after_wal_entry_position == manifest.replay_after_wal_entry_position
    assert row.current_generation == manifest.current_generation
    assert row.generations == tuple(sorted((s.generation, s.path) for s in manifest.sstables))
    assert row.wal_entry_position_last_seen == wal_positions(table_dir, row.region)[-1]
    assert row.merged_generation == merged


def test_inline_snapshot_of_lance_written_regions(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=60, regions=3, rounds=3, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        merge(table, max_generations=1)
        # A WAL entry the writer's hint does not know of yet: the snapshot must probe past the hint.
        region = table.region_ids()[0]
        wal = tmp_path / "t" / "_mem_wal" / region / "wal"
        last = wal_positions(tmp_path / "t", region)[-1]
        shutil.copy(wal / wal_entry_name(last), wal / wal_entry_name(last + 1))
        before = table.index_details()

        result = build_snapshot(table)

        details = table.index_details()
        assert result.storage == "inline" and result.path is None and result.regions == 3
        assert result.stale_wal_hints == 1 and result.progress_repairs == []
        assert details.has_inline_snapshot and details.num_regions == 3
        assert details.snapshot_ts_millis == result.snapshot_ts_millis > 0
        assert details.merged == before.merged and details.table_version == before.table_version + 1
        stored = read_stored_snapshot(table, details)
        assert [r.region for r in stored.rows] == table.region_ids()
        for row in stored.rows:
            assert_row_matches_manifest(row, tmp_path / "t", before.merged_generation(row.region))
        # Lance itself reads the bytes as a Lance file with the spec's columns.
        path = tmp_path / "inline.lance"
        path.write_bytes(details.to_proto().inline_snapshots)
        decoded = LanceFileReader(str(path)).read_all().to_table()
        assert decoded.schema.field("region_id").type == pa.binary(16)
        assert decoded.column("wal_id_last_seen").to_pylist()[0] == last + 1
        # The rewritten details keep Lance working: its config reads back, a writer writes, a merge merges.
        assert table.dataset().mem_wal_index_details()["num_shards"] == 3
        with table.dataset().mem_wal_writer(region, max_memtable_rows=5) as writer:
            writer.put(pa.table({"id": [10**9], "name": ["new"], "score": [1.0]}, schema=DEMO_SCHEMA))
        assert merge(table).failures == []
        assert status(table).pending_total == 0
        assert table.dataset().count_rows(filter="id = 1000000000") == 1


def test_file_snapshot_of_150_regions_and_hint_refresh(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA), uri)
    lance.dataset(uri).initialize_mem_wal()
    regions = write_regions(uri, {}, 150, versions=2, generations=3, wal_entries=4, wal_hint=2)
    with MemWalTable.open(uri) as table:
        result = build_snapshot(table)
        details = table.index_details()
        assert result.storage == "file" and result.regions == 150 and result.stale_wal_hints == 150
        assert result.path == f"_indices/{details.index_uuid}/index.lance"
        assert (tmp_path / "t" / result.path).stat().st_size == result.snapshot_bytes
        assert not details.has_inline_snapshot and details.num_regions == 150
        stored = read_stored_snapshot(table, details)
        assert sorted(r.region for r in stored.rows) == sorted(regions)
        for row in stored.rows:
            assert_row_matches_manifest(row, tmp_path / "t", 0)
            assert row.wal_entry_position_last_seen == 4 and row.version == 2

        # Lance re-keys the MemWAL index at every commit that touches it; the file is still found.
        lance.dataset(uri).merge_insert(
            "id"
        ).when_matched_update_all().when_not_matched_insert_all().mark_sstables_as_compacted(
            [CompactedSsTable(regions[0], 1)]
        ).execute(pa.table({"id": [2], "name": ["y"], "score": [2.0]}, schema=DEMO_SCHEMA))
        later = table.index_details()
        assert (
            later.index_uuid != details.index_uuid and later.snapshot_ts_millis == details.snapshot_ts_millis
        )
        assert read_stored_snapshot(table, later).rows == stored.rows

        refreshed = build_snapshot(table, refresh_hints=True)
        assert len(refreshed.refreshed_hints) == 150
        rows = read_stored_snapshot(table, table.index_details()).rows
        assert {r.version for r in rows} == {3}
        manifest = independent_latest_manifest(tmp_path / "t", regions[0])
        assert manifest.wal_entry_position_last_seen == 4 and manifest.writer_epoch == 1
        assert build_snapshot(table).stale_wal_hints == 0


# `memwal status` in a process of its own; prints whether it loaded Lance.
STATUS_PROBE = """
import json, sys
from memwal_core.cli.main import main
assert main(["status", "--json", sys.argv[1]]) == 0
print("lance loaded" if "lance" in sys.modules else "no lance", file=sys.stderr)
"""


def status_loads_lance(uri: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", STATUS_PROBE, uri], capture_output=True, text=True, check=True
    )
    assert len(json.loads(done.stdout)["regions"]) == 5
    return done.stderr.strip().endswith("lance loaded")


def test_the_snapshot_versions_are_read_without_lance_from_memwals_copy(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA), uri)
    lance.dataset(uri).initialize_mem_wal()
    write_regions(uri, {}, 5, versions=3)
    copy = tmp_path / "t" / REGION_VERSIONS_FILE
    with MemWalTable.open(uri) as table:
        result = build_snapshot(table, inline_threshold=0)  # a snapshot file: Lance decodes it
        details = table.index_details()
        recorded = {r.region: r.version for r in read_stored_snapshot(table, details).rows}
        assert result.storage == "file" and set(recorded.values()) == {3}
        record = json.loads(copy.read_bytes())
        assert record == {
            "snapshot_ts_millis": details.snapshot_ts_millis,
            "regions": dict(sorted(recorded.items())),
            "digest": record["digest"],
            "path": result.path,
        }
        assert snapshot_hints(table, details) == recorded
    assert not status_loads_lance(uri)

    # A copy of another snapshot, or one that does not parse, is passed over for the snapshot itself.
    copy.write_text(json.dumps({"snapshot_ts_millis": 1, "regions": dict.fromkeys(recorded, 99)}))
    with MemWalTable.open(uri) as table:
        assert snapshot_hints(table, table.index_details()) == recorded
    copy.write_bytes(b"{not json")
    with MemWalTable.open(uri) as table:
        assert snapshot_hints(table, table.index_details()) == recorded
    copy.unlink()
    assert status_loads_lance(uri)


@pytest.mark.parametrize("inline_threshold", [100, 0])
def test_a_snapshot_of_an_unchanged_table_commits_nothing(tmp_path: Path, inline_threshold: int) -> None:
    """The scheduled snapshot of an idle table writes no table version and no file; any change, or the
    stored file gone (Lance's cleanup), builds it again."""
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=50, regions=2, rounds=1, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        first = build_snapshot(table, inline_threshold=inline_threshold)
        assert not first.unchanged and first.new_version == first.read_version + 1
        again = build_snapshot(table, inline_threshold=inline_threshold)
        assert again.unchanged and again.new_version == again.read_version == first.new_version
        assert again.snapshot_ts_millis == first.snapshot_ts_millis
        assert table.latest_version() == first.new_version

        merge(table)  # merge progress moved: the rows differ
        merged = build_snapshot(table, inline_threshold=inline_threshold)
        assert not merged.unchanged and merged.new_version == table.latest_version()
        stored = read_stored_snapshot(table, table.index_details())
        merged_now = table.index_details().merged
        assert {r.region: r.merged_generation for r in stored.rows} == merged_now and min(
            merged_now.values()
        ) > 0
        assert build_snapshot(table, inline_threshold=inline_threshold).unchanged

        if merged.path is not None:  # a file snapshot whose file is gone is built again
            (tmp_path / "t" / merged.path).unlink()
            rebuilt = build_snapshot(table, inline_threshold=inline_threshold)
            assert not rebuilt.unchanged and rebuilt.path is not None
            assert read_stored_snapshot(table, table.index_details()).rows == stored.rows


@pytest.mark.parametrize("mode", ["bucket", "identity"])
def test_region_field_columns(tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "t")
    base = pa.table(
        {"id": list(range(4)), "name": [f"n{i}" for i in range(4)], "score": [0.0] * 4}, DEMO_SCHEMA
    )
    dataset = lance.write_dataset(base, uri)
    if mode == "bucket":
        dataset.initialize_mem_wal(bucket_column="id", num_buckets=4)
    else:
        dataset.initialize_mem_wal(identity_column="name")
    dataset = lance.dataset(uri)
    spec = dataset.mem_wal_index_details()["sharding_specs"][0]
    # Lance's own routing is the oracle for each region's field value.
    values = evaluate_sharding_spec(base.to_batches()[0], spec, dataset.lance_schema).column(0).to_pylist()
    arrow_type = pa.int32() if mode == "bucket" else pa.string()

    def field_values(number: int) -> list[tuple[str, bytes]]:
        value: Any = values[number]
        raw = value.to_bytes(4, "little", signed=True) if mode == "bucket" else value.encode()
        return [("bucket", raw)]

    regions = write_regions(uri, {}, 4, spec_id=spec["spec_id"], field_values=field_values)
    with MemWalTable.open(uri) as table:
        build_snapshot(table)
        details = table.index_details()
        path = tmp_path / "snap.lance"
        path.write_bytes(details.to_proto().inline_snapshots)
        decoded = LanceFileReader(str(path)).read_all().to_table()
    assert decoded.schema.field("region_field_bucket").type == arrow_type
    by_region = {
        str(uuid.UUID(bytes=r["region_id"])): (r["region_field_bucket"], r["region_spec_id"])
        for r in decoded.to_pylist()
    }
    assert by_region == {region: (values[i], spec["spec_id"]) for i, region in enumerate(regions)}


def test_merger_and_snapshot_builder_race(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=100, regions=2, rounds=12, rows_per_generation=10)
    results: list[SnapshotResult] = []
    errors: list[BaseException] = []
    pause = random.Random(5)
    merging = threading.Event()
    merging.set()

    def builder() -> None:
        try:
            with MemWalTable.open(uri) as table:
                # Until the merges are done (at least 50 rounds): on a loaded machine a fixed
                # number of rounds can all land before the merger gets going.
                while merging.is_set() or len(results) < 50:
                    results.append(build_snapshot(table, lease_wait=120))
                    # A snapshot takes milliseconds, a merge far longer: spread the rounds over the merges.
                    time.sleep(pause.uniform(0, 0.06))
        except BaseException as exc:
            errors.append(exc)

    def merger() -> None:
        try:
            with MemWalTable.open(uri) as table:
                while True:
                    result = merge(table, max_generations=1)
                    assert result.failures == [], result.failures
                    if not result.regions:
                        return
                    # Real merges take far longer than these 10-row ones; without a pause the merger
                    # re-takes the lease before the builder's next poll (the lease queues nobody).
                    time.sleep(0.15)
        except BaseException as exc:
            errors.append(exc)
        finally:
            merging.clear()

    threads = [threading.Thread(target=builder), threading.Thread(target=merger)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(results) >= 50 and all(r.progress_repairs == [] for r in results)
    history = progress_history(uri)
    assert_progress_never_decreases(history)
    # The two really interleaved: snapshot commits landed between merge commits that moved progress.
    moves = [i for i in range(1, len(history)) if history[i] != history[i - 1]]
    assert len(moves) >= 20 and moves[-1] - moves[0] > len(moves)
    with MemWalTable.open(uri) as table:
        assert status(table).pending_total == 0
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
    assert rows == log.model()


def test_unlocked_rewrite_is_caught_and_repaired(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=60, regions=2, rounds=2, rows_per_generation=10)
    with MemWalTable.open(uri) as table:
        stale = table.dataset()
        stale_details = table.index_details(stale.version).to_proto()
        merge(table, max_generations=1)
        merged = table.index_details().merged
        assert sorted(merged.values()) == [1, 1]

        # A details rewrite built before that merge and committed without the lease rolls it back.
        version = rewrite_details(table, stale, stale_details, str(uuid.uuid4()))
        assert table.index_details(version).merged == {}
        lost = progress_regressions(table, stale.version, version)
        assert lost == {region: (1, 0) for region in merged}

        repairs = repair_progress(table, lost)
        assert sorted(r.region for r in repairs) == sorted(merged)
        assert table.index_details().merged == merged
        assert progress_regressions(table, version, table.dataset().version) == {}
        assert merge(table).failures == []
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
    assert rows == log.model()


def test_snapshot_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=30, regions=2, rounds=1, rows_per_generation=10)
    assert main(["snapshot", uri, "--json", "--inline-threshold", "1"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["regions"] == 2 and payload["storage"] == "file" and payload["progress_repairs"] == []
    assert (tmp_path / "t" / payload["path"]).is_file()
    assert main(["snapshot", uri, "--inline-threshold", "-1"]) == 2
    assert "--inline-threshold" in capsys.readouterr().err
    lance.write_dataset(pa.table({"id": [1]}), str(tmp_path / "plain"))
    assert main(["snapshot", str(tmp_path / "plain")]) == 2
    assert "does not have MemWAL enabled" in capsys.readouterr().err
    # Nothing was written for the refused runs: still one snapshot file.
    assert len(os.listdir(tmp_path / "t" / "_indices")) == 1


def test_merge_commit_waits_for_the_details_lease(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=30, regions=1, rounds=1, rows_per_generation=10)
    merged: list[int] = []

    def merger() -> None:
        with MemWalTable.open(uri) as table:
            merged.append(merge(table).generations_merged)

    with MemWalTable.open(uri) as table, details_lease(table.store):
        thread = threading.Thread(target=merger)
        thread.start()
        time.sleep(2.0)
        # The merger collapsed its generation but may not commit while the snapshot builder's lease is held.
        assert thread.is_alive() and table.index_details().merged == {}
    thread.join(timeout=300)
    assert len(merged) == 1 and merged[0] >= 1
    with MemWalTable.open(uri) as table:
        assert status(table).pending_total == 0


def test_hint_refresh_beside_a_live_lance_writer(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    base = pa.table({"id": [0], "name": ["b"], "score": [0.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(base, uri).initialize_mem_wal()
    region = str(uuid.uuid4())
    model = {0: ("b", 0.0)}
    with MemWalTable.open(uri) as table:
        with lance.dataset(uri).mem_wal_writer(region, max_memtable_rows=10, durable_write=True) as writer:
            for key in range(1, 26):
                writer.put(
                    pa.table({"id": [key], "name": [f"n{key}"], "score": [float(key)]}, schema=DEMO_SCHEMA)
                )
                model[key] = (f"n{key}", float(key))
                if key in (5, 15):
                    # WAL entries the writer's hint (updated at MemTable flushes) does not know yet.
                    before = table.region_store(region).read_latest()
                    assert build_snapshot(table, refresh_hints=True).refreshed_hints == [region]
                    after = table.region_store(region).read_latest()
                    assert after.version == before.version + 1 and after.writer_epoch == before.writer_epoch
                    assert after.wal_entry_position_last_seen == wal_positions(tmp_path / "t", region)[-1]
        # The writer went on over our manifest versions: same epoch, every flush listed, no row lost.
        final = table.region_store(region).read_latest()
        assert final.writer_epoch == 1 and final.generation_numbers == [1, 2, 3]
        assert merge(table).failures == []
        assert {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()} == model
