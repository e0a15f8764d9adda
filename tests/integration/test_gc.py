"""Garbage collection: each keep rule, the two-phase delete, live writers and readers, crashes, S3."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import LsmScanner, ShardSnapshot

from memwal_core.cli.main import main as cli_main
from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, RULES_DIR, wal_entry_name
from memwal_core.format.regions import RegionManifest
from memwal_core.model.rules import MAINTENANCE_RULES
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.plan import plan_gc
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import GcResult, execute_gc, gc
from memwal_core.services.merge.service import merge
from tests.support.cli import option_flags
from tests.support.model import ModelTable
from tests.support.paths import PROJECT_ROOT
from tests.support.schema import key_field
from tests.support.tables import tree_digest

SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("v", pa.int64()),
    ]
)
NOW = GcPolicy(grace_seconds=0)
# A plan made this long from now sees every WAL entry and manifest version past the fence retention.
RETENTION_LATER = NOW.fence_retention_seconds + 60


def rows(start: int, count: int, factor: int = 10) -> list[dict[str, int]]:
    return [{"id": k, "v": k * factor} for k in range(start, start + count)]


def new_table(uri: str, options: dict[str, str] | None = None) -> ModelTable:
    return ModelTable(uri, SCHEMA, ["id"], base_rows=rows(0, 1), storage_options=options)


def write_generations(model: ModelTable, region: str | None, count: int, start: int) -> str:
    """`count` flushed generations of 10 rows each in one writer session."""
    return model.write(region, [("put", rows(start, 10 * count))], memtable_rows=10)


def forget_old_versions(uri: str) -> None:
    """Lance's own version cleanup: only the latest version stays (tagged ones excepted)."""
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)


def run_gc(uri: str, policy: GcPolicy = NOW, *, dry_run: bool = False) -> GcResult:
    with MemWalTable.open(uri) as table:
        return gc(table, dry_run=dry_run, policy=policy)


def run_gc_later(uri: str, policy: GcPolicy = NOW, *, dry_run: bool = False) -> GcResult:
    """GC as it runs once the fence retention has passed (a week from now)."""
    with MemWalTable.open(uri) as table:
        plan = plan_gc(table, policy, now=time.time() + RETENTION_LATER)
        return execute_gc(table, plan, dry_run=dry_run)


def latest(uri: str, region: str) -> RegionManifest:
    with MemWalTable(uri) as table:
        return table.region_store(region).read_latest()


def gen_dirs(uri: str, region: str) -> list[str]:
    return sorted(p.name for p in (Path(uri) / MEM_WAL_DIR / region).iterdir() if "_gen_" in p.name)


def reasons(result: GcResult) -> dict[int, str]:
    return {k["generation"]: k["reason"] for k in result.to_json()["kept"]}


def deleted(result: GcResult) -> list[int]:
    return sorted(d["generation"] for d in result.to_json()["deleted"])


def snapshot_of(manifest: RegionManifest) -> ShardSnapshot:
    snapshot = ShardSnapshot(manifest.region).with_current_generation(manifest.current_generation)
    for g in manifest.generations:
        snapshot = snapshot.with_sstable(g.generation, g.path)
    return snapshot


def test_unmerged_generations_are_kept(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 3, 1)
    with MemWalTable.open(uri) as table:
        merge(table, max_generations=1)
    forget_old_versions(uri)
    before = latest(uri, region)

    result = run_gc(uri)

    assert deleted(result) == [1]
    assert reasons(result) == {2: "not_merged", 3: "not_merged"}
    after = latest(uri, region)
    assert after.generation_numbers == [2, 3]
    assert after.writer_epoch == before.writer_epoch and after.version == before.version + 1
    assert len(gen_dirs(uri, region)) == 2
    with MemWalTable.open(uri) as table:  # the rest still merges
        merge(table)
    model.assert_merged()
    assert run_gc(uri).to_json()["deleted"] == []  # idempotent: nothing left to do


def test_lagging_index_keeps_generations_until_caught_up(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    lance.dataset(uri).create_scalar_index("v", "BTREE")
    region = write_generations(model, None, 2, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)

    result = run_gc(uri)
    assert result.to_json()["maintained_indexes"] == ["v_idx"]
    assert reasons(result) == {1: "index_not_caught_up", 2: "index_not_caught_up"}
    assert latest(uri, region).generation_numbers == [1, 2]

    lance.dataset(uri).optimize.optimize_indices()
    forget_old_versions(uri)
    assert deleted(run_gc(uri)) == [1, 2]
    assert gen_dirs(uri, region) == []
    model.assert_merged()


def test_dropped_index_stops_keeping_generations_and_catchup_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    model = ModelTable(uri, SCHEMA, ["id"], rows(0, 1), btree_indexes=["v"], maintained_indexes=["v_idx"])
    region = write_generations(model, None, 2, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    kept = run_gc(uri)
    assert kept.to_json()["maintained_indexes"] == ["v_idx"]
    assert reasons(kept) == {1: "index_not_caught_up", 2: "index_not_caught_up"}

    # Dropped, the listed index can never catch up: it must not keep every generation forever.
    lance.dataset(uri).drop_index("v_idx")
    forget_old_versions(uri)
    freed = run_gc(uri)
    assert freed.to_json()["maintained_indexes"] == []
    assert deleted(freed) == [1, 2] and gen_dirs(uri, region) == []

    assert cli_main(["catchup", uri, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["missing_indexes"] == ["v_idx"] and payload["indexes"] == []
    # The list is the user's choice (maintain_all_indexes is off): reported, not rewritten.
    assert payload["maintained_list"]["removed"] == []
    assert lance.dataset(uri).mem_wal_index_details()["maintained_indexes"] == ["v_idx"]
    model.assert_merged()


def test_retained_version_keeps_time_travel_readable(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 2, 1)
    old_version = lance.dataset(uri).version  # nothing merged at this version
    old_rows = {r["id"]: r["v"] for r in rows(0, 21)}
    with MemWalTable.open(uri) as table:
        merge(table)
    lance.dataset(uri).tags.create("before-merge", old_version)
    forget_old_versions(uri)  # the tagged version stays

    result = run_gc(uri)
    assert reasons(result) == {1: "retained_version", 2: "retained_version"}
    # Time travel: the old base version plus its unmerged generations still reads every row.
    old = lance.dataset(uri, version=old_version)
    scanned = LsmScanner.from_snapshots(old, [snapshot_of(latest(uri, region))]).to_table().to_pylist()
    assert {r["id"]: r["v"] for r in scanned} == old_rows

    lance.dataset(uri).tags.delete("before-merge")
    forget_old_versions(uri)
    assert deleted(run_gc(uri)) == [1, 2]
    model.assert_merged()


def test_grace_period_keeps_directories_for_live_readers(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 2, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    # A native LSM reader whose snapshot lists both generations, built before the prune.
    snapshot = snapshot_of(latest(uri, region))
    expected = LsmScanner.from_snapshots(lance.dataset(uri), [snapshot]).count_rows()
    hour = GcPolicy(grace_seconds=3600)

    first = run_gc(uri, hour)
    assert deleted(first) == [] and len(first.to_json()["pruned"]) == 2
    assert reasons(first) == {1: "grace_period", 2: "grace_period"}
    assert latest(uri, region).generation_numbers == []
    assert len(gen_dirs(uri, region)) == 2
    assert LsmScanner.from_snapshots(lance.dataset(uri), [snapshot]).count_rows() == expected

    # Later runs time the grace period from the manifest version that dropped them.
    second = run_gc(uri, hour)
    assert second.to_json()["pruned"] == [] and reasons(second) == {1: "grace_period", 2: "grace_period"}
    assert all(not d["orphan"] for d in run_gc(uri, NOW, dry_run=True).to_json()["deleted"])
    time.sleep(1.5)
    assert deleted(run_gc(uri, GcPolicy(grace_seconds=1))) == [1, 2]
    assert gen_dirs(uri, region) == []
    # After the grace period the old snapshot is gone, as the format doc says readers must expect.
    with pytest.raises(OSError, match="not found"):
        LsmScanner.from_snapshots(lance.dataset(uri), [snapshot]).count_rows()
    model.assert_merged()


def test_wal_and_manifest_versions_stay_for_the_fence_retention(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 2, 1)
    write_generations(model, region, 2, 100)  # a second writer session: claims with a fence sentinel
    write_generations(model, region, 1, 200)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    manifest = latest(uri, region)
    wal = Path(uri) / MEM_WAL_DIR / region / REGION_WAL_DIR
    stored = lambda: sorted(int(p.name[:64][::-1], 2) for p in wal.iterdir() if p.name.endswith(".arrow"))  # noqa: E731
    before = stored()

    # A week's retention: nothing of the WAL or the manifest versions goes yet, and GC says why.
    report = run_gc(uri, GcPolicy(grace_seconds=0, keep_manifest_versions=1)).to_json()
    assert (
        deleted(run_gc(uri, dry_run=True)) == []
        and stored() == before
        and report["wal_entries"]["deleted"] == 0
    )
    assert report["fence_retention"]["wal_positions"] == manifest.replay_after_wal_entry_position
    assert report["fence_retention"]["manifest_versions"] > 0

    # A week on, every covered entry goes (the newest manifest version is older than the retention).
    later = run_gc_later(uri).to_json()
    assert later["wal_entries"]["deleted"] == manifest.replay_after_wal_entry_position
    assert stored() == [p for p in before if p > manifest.replay_after_wal_entry_position]
    # A new writer claims the region and writes; nothing acknowledged is lost.
    write_generations(model, region, 1, 300)
    with MemWalTable.open(uri) as table:
        merge(table)
    model.assert_merged()


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    write_generations(model, None, 3, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    before = tree_digest(Path(uri))
    result = run_gc(uri, dry_run=True)
    assert result.dry_run and deleted(result) == [1, 2, 3]
    assert run_gc_later(uri, dry_run=True).to_json()["wal_entries"]["deleted"] > 0
    assert tree_digest(Path(uri)) == before
    assert pickle.loads(pickle.dumps(result.plan)) == result.plan  # plans ship to other processes
    with MemWalTable.open(uri) as table:
        assert gc(table, policy=NOW).dry_run  # the Python API is a dry run unless told otherwise
    assert tree_digest(Path(uri)) == before


def test_old_manifest_versions_and_orphans(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 4, 1)
    region_dir = Path(uri) / MEM_WAL_DIR / region
    orphan = region_dir / "deadbeef_gen_2"  # a failed flush retry: listed by no manifest version
    (orphan / "data").mkdir(parents=True)
    (orphan / "data" / "x.lance").write_bytes(b"partial")
    versions_before = latest(uri, region).version

    result = run_gc_later(uri, GcPolicy(grace_seconds=0, keep_manifest_versions=2))
    assert [d["orphan"] for d in result.to_json()["deleted"]] == [True]
    assert not orphan.exists()
    stored = sorted(int(p.name[:64][::-1], 2) for p in (region_dir / "manifest").glob("*.binpb"))
    assert stored == [versions_before - 1, versions_before]
    # Readers and Lance's writer find the latest even with the hint pointing at a deleted version.
    (region_dir / "manifest" / "version_hint.json").write_text('{"version": 1}')
    assert latest(uri, region).version == versions_before
    write_generations(model, region, 1, 100)
    assert latest(uri, region).version > versions_before
    with MemWalTable.open(uri) as table:
        merge(table)
    model.assert_merged()


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LANCE_LOG": "error"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.gc_proc", *args],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_gc_while_native_writer_flushes(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 2, 10_000)
    writer = _spawn("write", uri, region, "1", "400")
    pruned: dict[str, int] = {}
    try:
        while writer.poll() is None:
            with MemWalTable.open(uri) as table:
                merge(table)
            forget_old_versions(uri)
            result = run_gc(uri)
            for outcome in result.outcomes:
                for d in outcome.deleted_dirs:
                    pruned.setdefault(d.path, outcome.pruned_in_version or 0)
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    acknowledged = [int(line) for line in out.split()]
    assert acknowledged == list(range(1, 401))
    assert pruned, "GC deleted generations while the writer ran"
    with MemWalTable.open(uri) as table:
        merge(table)
        store = table.region_store(region)
        # Pruned generations never come back into any later manifest version.
        for version in store.stored_versions():
            listed = {g.path for g in store.read(version).generations}
            assert not {p for p, v in pruned.items() if v and version >= v} & listed
    model.rows.update({(k,): {"id": k, "v": k * 10} for k in acknowledged})
    model.assert_merged()


def test_kill_minus_nine_then_rerun_is_consistent(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    model = new_table(uri)
    regions = [write_generations(model, None, 6, 1000 * i) for i in range(1, 4)]
    with MemWalTable.open(uri) as table:
        merge(table, max_generations=4)
    forget_old_versions(uri)
    killed = 0
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2):
        child = _spawn("gc", uri)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        killed += child.wait(timeout=30) == -signal.SIGKILL
        for region in regions:  # readers find a consistent region after every kill
            manifest = latest(uri, region)
            root = Path(uri) / MEM_WAL_DIR / region
            assert all((root / g.path / "_versions").is_dir() for g in manifest.generations)
    assert killed, "at least one GC was killed mid-run"
    result = run_gc(uri)
    assert result.failures == []
    for region in regions:
        manifest = latest(uri, region)
        assert manifest.generation_numbers == [5, 6]
        assert sorted(gen_dirs(uri, region)) == sorted(g.path for g in manifest.generations)
    # The writer and the merger still work on every region.
    write_generations(model, regions[0], 1, 50_000)
    with MemWalTable.open(uri) as table:
        merge(table)
    model.assert_merged()


@pytest.mark.parametrize(("store", "scheme", "server"), [("s3", "s3", "seaweed"), ("azure", "az", "azurite")])
def test_object_store_end_to_end_through_the_cli(
    store: str, scheme: str, server: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"{scheme}://memwal-test/gc-{uuid.uuid4().hex}"
    options = request.getfixturevalue(server).storage_options()
    model = new_table(uri, options)
    region = write_generations(model, None, 3, 1)
    with MemWalTable.open(uri, options) as table:
        merge(table, max_generations=2)
    lance.dataset(uri, storage_options=options).cleanup_old_versions(older_than=timedelta(0))
    flags = option_flags(options)

    assert cli_main(["gc", uri, *flags, "--json", "--dry-run", "--grace-seconds", "0"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] and [d["generation"] for d in dry["deleted"]] == [1, 2]

    assert cli_main(["gc", uri, *flags, "--json", "--grace-seconds", "0"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert not payload["dry_run"]
    assert [(d["region"], d["generation"]) for d in payload["deleted"]] == [(region, 1), (region, 2)]
    assert payload["kept"] == [
        {"region": region, "generation": 3, "path": payload["kept"][0]["path"], "reason": "not_merged"}
    ]
    assert all(d["path"].startswith(uri) for d in payload["deleted"])
    with MemWalTable.open(uri, options) as table:
        files = table.store.list_files(f"{MEM_WAL_DIR}/{region}", recursive=True)
        dirs = {f.path.split("/")[2] for f in files if "_gen_" in f.path}
        assert dirs == {payload["kept"][0]["path"]}
        again = gc(table, dry_run=False, policy=NOW).to_json()
        assert again["deleted"] == [] and again["pruned"] == []
        merge(table)
    model.assert_merged()


def test_bad_grace_period_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    new_table(uri)
    assert cli_main(["gc", uri, "--grace-seconds", "-5"]) == 2
    err = capsys.readouterr().err
    assert "grace-seconds" in err and len(err.strip().splitlines()) == 1


def test_abandoned_staging_and_wal_temp_files_go_after_their_age(tmp_path: Path) -> None:
    """A Spark job whose driver died leaves `_memwal_staging/` files, a writer killed mid-put a
    `.tmp` upload in its WAL folder; only old ones are deleted."""
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 1, 1)
    wal_dir = Path(uri) / MEM_WAL_DIR / region / REGION_WAL_DIR
    old_temp, fresh_temp = (
        wal_dir / f"{wal_entry_name(99)}.tmp.dead",
        wal_dir / f"{wal_entry_name(98)}.tmp.live",
    )
    old_temp.write_bytes(b"z")
    fresh_temp.write_bytes(b"z")
    staging = Path(uri) / "_memwal_staging"
    (staging / "ingest-dead").mkdir(parents=True)
    old, fresh = staging / "ingest-dead" / "a.lance", staging / "b-live.lance"
    old.write_bytes(b"x" * 100)
    fresh.write_bytes(b"y" * 10)
    two_days_ago = time.time() - 2 * 86_400
    os.utime(old, (two_days_ago, two_days_ago))
    os.utime(old_temp, (two_days_ago, two_days_ago))
    policy = GcPolicy(grace_seconds=0)
    dry = run_gc(uri, policy, dry_run=True).to_json()
    assert dry["staging_files_deleted"] == 1 and old.exists()
    done = run_gc(uri, policy).to_json()
    assert done["staging_files_deleted"] == 1 and done["bytes_deleted"] >= 100
    assert done["wal_temp_files_deleted"] == 1 and not old_temp.exists() and fresh_temp.exists()
    assert not old.exists() and fresh.exists()
    assert run_gc(uri, GcPolicy(abandoned_after_seconds=0)).to_json()["staging_files_deleted"] == 1
    assert not fresh.exists()


def test_garbled_old_manifest_version_fails_its_region_alone_and_names_it(tmp_path: Path) -> None:
    """The oldest manifest version tells GC where its last run stopped deleting the WAL."""
    uri = str(tmp_path / "t")
    model = new_table(uri)
    damaged = write_generations(model, None, 2, 1)
    healthy = write_generations(model, None, 2, 1000)
    manifests = Path(uri) / MEM_WAL_DIR / damaged / "manifest"
    oldest = max(manifests.glob("*.binpb"), key=lambda p: -int(p.name[:64][::-1], 2))
    oldest.write_bytes(b"\xff\xff\xff\xff garbage")
    wal = Path(uri) / MEM_WAL_DIR / damaged / REGION_WAL_DIR
    before = sorted((p.name, p.read_bytes()) for p in wal.iterdir())
    result = run_gc_later(uri)
    failures = {f.region: f.error for f in result.failures}
    assert set(failures) == {damaged}, failures
    assert str(manifests) in failures[damaged]
    assert sorted((p.name, p.read_bytes()) for p in wal.iterdir()) == before, (
        "GC touched a damaged region's WAL"
    )
    assert healthy in {o.region for o in result.outcomes}, "the other region is still collected"


def test_a_table_kept_under_newer_rules_is_refused_and_nothing_is_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A later release's GC records newer maintenance rules: this one must not delete by its own."""
    uri = str(tmp_path / "t")
    model = new_table(uri)
    write_generations(model, None, 2, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    assert len(run_gc(uri, GcPolicy(grace_seconds=3600)).to_json()["pruned"]) == 2
    rules = Path(uri) / RULES_DIR
    assert [p.name for p in rules.iterdir()] == [f"{MAINTENANCE_RULES:08d}.json"], "this release's"
    newer = rules / f"{MAINTENANCE_RULES + 1:08d}.json"
    newer.write_text(json.dumps({"rules": MAINTENANCE_RULES + 1}))
    before = tree_digest(Path(uri))

    for dry in ([], ["--dry-run"]):
        assert cli_main(["gc", uri, "--grace-seconds", "0", *dry]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"memwal gc: error: table {uri} is kept under maintenance rules {MAINTENANCE_RULES + 1} "
            f"({newer}); this memwal knows rules up to {MAINTENANCE_RULES}: refused, upgrade memwal on "
            "this host"
        ]
    assert tree_digest(Path(uri)) == before, "nothing deleted, nothing written"
    newer.unlink()
    assert deleted(run_gc(uri)) == [1, 2]
    model.assert_merged()


def test_a_second_run_on_an_idle_table_deletes_nothing(tmp_path: Path) -> None:
    """The newest 10 manifest versions stay, so the oldest stays while the fence retention's anchor
    moves on; each run re-deleted the WAL positions between the two (issue 48: ~900 a run)."""
    uri = str(tmp_path / "t")
    model = new_table(uri)
    region = write_generations(model, None, 12, 1)
    with MemWalTable.open(uri) as table:
        merge(table)
    forget_old_versions(uri)
    assert deleted(run_gc(uri)) == list(range(1, 13))  # its last version: the prune of every generation
    manifest = latest(uri, region)

    first = run_gc_later(uri)
    assert first.to_json()["wal_entries"]["deleted"] == manifest.replay_after_wal_entry_position
    assert first.to_json()["manifest_versions_deleted"] == manifest.version - 10
    second = run_gc_later(uri)
    assert second.to_json()["wal_entries"]["deleted"] == 0
    assert second.requests.get("delete", 0) == 0, second.requests
    assert second.to_json()["objects_deleted"] == 0
    # New entries and versions are deleted again once old enough, from where the last run stopped.
    write_generations(model, region, 2, 500)
    with MemWalTable.open(uri) as table:
        merge(table)
    third = run_gc_later(uri)
    assert third.to_json()["wal_entries"]["deleted"] == (
        latest(uri, region).replay_after_wal_entry_position - manifest.replay_after_wal_entry_position
    )
    model.assert_merged()
