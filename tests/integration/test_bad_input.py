"""Bad input: exit status 2, one line on stderr naming the object, no traceback, nothing changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal_core.demo import DemoLog, write_demo_table
from memwal_core.format.naming import region_manifest_name, table_manifest_name
from tests.support.paths import PROJECT_ROOT
from tests.support.tables import independent_latest_manifest, tree_digest


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoLog]:
    path = tmp_path_factory.mktemp("pristine") / "table"
    log = write_demo_table(str(path), base_rows=200, regions=2, rounds=3, rows_per_generation=30)
    return path, log


@pytest.fixture
def table(pristine: tuple[Path, DemoLog], tmp_path: Path) -> tuple[Path, DemoLog]:
    """A private copy of the demo table that a test may damage."""
    path, log = pristine
    copy = tmp_path / "table"
    shutil.copytree(path, copy)
    return copy, log


def latest_manifest_file(path: Path, region: str) -> Path:
    version = independent_latest_manifest(path, region).version
    return path / "_mem_wal" / region / "manifest" / region_manifest_name(version)


def assert_bad_input(root: Path, args: list[str], names: str) -> None:
    before = tree_digest(root) if root.exists() else None
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and " WARN " not in line]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert names in lines[0], lines[0]
    if "--json" in args:  # one object even so, the failure under `failures` (issue 28)
        printed = json.loads(proc.stdout)
        assert printed["read_version"] is None and printed["new_version"] is None
        assert printed["failures"] == [
            {"region": None, "error": lines[0].split(": error: ", 1)[1], "exit_code": 2}
        ]
    else:
        assert proc.stdout == ""
    if before is not None:
        assert tree_digest(root) == before, "a failed status must not change anything"


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert_bad_input(tmp_path, ["status", str(missing)], str(missing))


def test_directory_that_is_not_a_lance_table(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "file.txt").write_text("hello")
    assert_bad_input(tmp_path, ["status", str(tmp_path / "dir")], "not a Lance table")


def test_lance_table_without_memwal(tmp_path: Path) -> None:
    path = tmp_path / "plain"
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), str(path))
    assert_bad_input(tmp_path, ["status", str(path), "--json"], "does not have MemWAL enabled")


def test_garbage_region_manifest(table: tuple[Path, DemoLog]) -> None:
    path, log = table
    target = latest_manifest_file(path, log.regions[0])
    target.write_bytes(b"\xff\xfe this is not a protobuf \x00\x01")
    assert_bad_input(path, ["status", str(path)], target.name)


def test_region_manifest_whose_version_disagrees_with_its_name(table: tuple[Path, DemoLog]) -> None:
    path, log = table
    target = latest_manifest_file(path, log.regions[1])
    older = path / "_mem_wal" / log.regions[1] / "manifest" / region_manifest_name(1)
    target.write_bytes(older.read_bytes())
    assert_bad_input(path, ["status", str(path)], "records version 1")


def test_truncated_table_manifest(table: tuple[Path, DemoLog]) -> None:
    path, _log = table
    version = lance.dataset(str(path)).version
    manifest = path / "_versions" / table_manifest_name(version)
    data = manifest.read_bytes()
    manifest.write_bytes(data[: len(data) // 2])
    assert_bad_input(path, ["status", str(path)], str(path))


def test_gc_with_an_unreadable_old_table_manifest_deletes_nothing(table: tuple[Path, DemoLog]) -> None:
    """GC reads every retained version's merge progress while it reads the regions: a version it cannot
    read fails the run as a whole, naming it, with every merged generation still in place."""
    path, _log = table
    assert run_cli("merge", str(path)).returncode == 0
    manifest = path / "_versions" / table_manifest_name(1)
    data = manifest.read_bytes()
    manifest.write_bytes(data[: len(data) // 2])
    assert_bad_input(path, ["gc", str(path), "--grace-seconds", "0", "--json"], manifest.name)


def test_stale_version_hint_still_finds_the_latest(table: tuple[Path, DemoLog]) -> None:
    path, log = table
    region = log.regions[0]
    truth = independent_latest_manifest(path, region).version
    hint = path / "_mem_wal" / region / "manifest" / "version_hint.json"
    hint.write_text(json.dumps({"version": 1}))
    proc = run_cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    found = {r["region"]: r["manifest_version"] for r in json.loads(proc.stdout)["regions"]}
    assert found[region] == truth
    hint.write_text("{not json")
    proc = run_cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert {r["region"]: r["manifest_version"] for r in json.loads(proc.stdout)["regions"]}[region] == truth


def test_a_hint_no_writer_can_store_is_ignored_naming_the_file(table: tuple[Path, DemoLog]) -> None:
    """2^64-1 cannot be followed by another version: no writer stored it, so the region is read without it."""
    path, log = table
    region = log.regions[0]
    truth = independent_latest_manifest(path, region).version
    hint = path / "_mem_wal" / region / "manifest" / "version_hint.json"
    hint.write_text(json.dumps({"version": 2**64 - 1}))
    proc = run_cli("status", str(path), "--json")
    hint.write_text(json.dumps({"version": truth}))
    assert proc.returncode == 0, proc.stderr
    assert {r["region"]: r["manifest_version"] for r in json.loads(proc.stdout)["regions"]}[region] == truth
    assert str(hint) in proc.stderr and "ignored" in proc.stderr


@pytest.mark.parametrize("target", ["file", "/dev/null"])
def test_a_table_path_that_is_a_file_is_not_a_lance_table(tmp_path: Path, target: str) -> None:
    path = tmp_path / "file" if target == "file" else Path(target)
    if target == "file":
        path.write_text("hello")
    for command in ("status", "merge", "gc"):
        assert_bad_input(tmp_path, [command, str(path), "--json"], f"{path} is not a Lance table")


def test_status_of_a_bucket_less_s3_uri_says_so(tmp_path: Path) -> None:
    assert_bad_input(tmp_path, ["status", "s3://"], "the URI s3:// names no bucket")


def test_hint_ahead_of_the_manifests_is_corrupt(table: tuple[Path, DemoLog]) -> None:
    """Writers store a version before the hint names it: a hint past the newest is a deleted manifest."""
    path, log = table
    region = log.regions[1]
    truth = independent_latest_manifest(path, region).version
    manifest_dir = path / "_mem_wal" / region / "manifest"
    (manifest_dir / "version_hint.json").write_text(json.dumps({"version": truth + 50}))
    assert_bad_input(
        path, ["status", str(path)], f"names manifest version {truth + 50}, but the newest stored"
    )
    (manifest_dir / "version_hint.json").write_text(json.dumps({"version": truth}))


def test_latest_region_manifest_deleted_is_refused_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "t"
    log = write_demo_table(str(path), base_rows=100, regions=3, rounds=2, rows_per_generation=20)
    broken, healthy = log.regions[0], log.regions[1:]
    manifest_dir = path / "_mem_wal" / broken / "manifest"
    latest = independent_latest_manifest(path, broken).version
    (manifest_dir / "version_hint.json").write_text(json.dumps({"version": latest}))
    os.remove(manifest_dir / region_manifest_name(latest))
    kept = sorted(os.listdir(manifest_dir))
    status = run_cli("status", str(path))
    assert status.returncode == 2 and str(manifest_dir) in status.stderr, status.stderr
    merged = run_cli("merge", str(path), "--json")
    assert merged.returncode == 2, merged.stderr
    report = json.loads(merged.stdout)
    assert [f["region"] for f in report["failures"]] == [broken]
    assert sorted(r["region"] for r in report["regions"]) == sorted(healthy), "the other regions merge"
    gc = run_cli("gc", str(path), "--grace-seconds", "0")
    assert gc.returncode != 0
    assert sorted(os.listdir(manifest_dir)) == kept, "GC wrote a region manifest over the gap"


def test_generations_without_a_manifest_are_corrupt(table: tuple[Path, DemoLog]) -> None:
    path, log = table
    region_dir = path / "_mem_wal" / log.regions[1]
    shutil.move(region_dir / "manifest", path.parent / "aside")
    try:
        assert_bad_input(path, ["status", str(path)], "has flushed generations")
        assert_bad_input(path, ["snapshot", str(path)], "has flushed generations")
    finally:
        shutil.move(path.parent / "aside", region_dir / "manifest")


def test_gap_in_manifest_versions(table: tuple[Path, DemoLog]) -> None:
    """With the hint at 1, a reader that probes one version at a time (Lance's) stops at 2."""
    path, log = table
    region = log.regions[0]
    truth = independent_latest_manifest(path, region).version
    assert truth >= 4
    manifest_dir = path / "_mem_wal" / region / "manifest"
    (manifest_dir / "version_hint.json").write_text(json.dumps({"version": 1}))
    os.remove(manifest_dir / region_manifest_name(3))
    assert_bad_input(path, ["status", str(path)], "manifest version 3 is missing")


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["frobnicate", "x"],
        ["init", "x"],
        ["status", "x", "-o", "novalue"],
    ],
)
def test_bad_usage_exits_2_with_one_line(args: list[str], tmp_path: Path) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_unknown_scheme_is_bad_input() -> None:
    proc = run_cli("status", "hdfs://bucket/t")
    assert proc.returncode == 2
    assert "hdfs" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["compact", "merge", "gc", "snapshot", "catchup", "retain"])
def test_no_command_writes_before_its_table_is_checked(tmp_path: Path, command: str) -> None:
    plain = tmp_path / "plain"
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), str(plain))
    before = tree_digest(plain)
    extra = ["--older-than", "7d"] if command == "retain" else []
    for target in (tmp_path / "no" / "such" / "path", plain):
        done = subprocess.run(
            [sys.executable, "-m", "memwal_core.cli.main", command, str(target), *extra],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists(), "a refused command created the missing path"
    assert tree_digest(plain) == before, "a refused command wrote into a table without MemWAL"


def test_init_refuses_a_key_lance_cannot_hash_before_changing_anything(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    lance.write_dataset(pa.table({"f": [1.5, 2.5], "id": pa.array([1, 2], pa.int64())}), str(uri))
    before = tree_digest(uri)
    refused = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "init", str(uri), "--primary-key", "f"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "cannot hash" in refused.stderr, refused.stderr
    assert tree_digest(uri) == before, "a refused init changed the table"
    done = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "init", str(uri), "--primary-key", "id"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("routing", [["--bucket", "id", "--num-buckets", "4"], ["--identity", "id"]])
def test_a_binary_key_takes_one_region(tmp_path: Path, routing: list[str]) -> None:
    """Lance routes by integers, booleans and strings only: memwal refuses routing a binary key itself
    (exit 2, nothing changed); unsharded, the binary key writes and merges."""
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.merge.service import merge
    from memwal_core.services.writer import MemWalWriter

    uri = tmp_path / "t"
    lance.write_dataset(pa.table({"id": pa.array([b"a", b"b"], pa.binary()), "v": [1, 2]}), str(uri))
    before = tree_digest(uri)
    refused = run_cli("init", str(uri), "--primary-key", "id", *routing)
    assert refused.returncode == 2, refused.stderr
    assert (
        len(refused.stderr.strip().splitlines()) == 1
        and "binary" in refused.stderr
        and "--unsharded" in refused.stderr
    )
    assert tree_digest(uri) == before, "a refused init changed the table"
    assert run_cli("init", str(uri), "--primary-key", "id", "--unsharded").returncode == 0
    with MemWalWriter(str(uri)) as writer:
        writer.put(pa.table({"id": pa.array([b"b", b"c"], pa.binary()), "v": [20, 30]}))
    with MemWalTable.open(str(uri)) as table:
        merge(table)
        rows = table.dataset().to_table().sort_by("id").to_pylist()
    assert rows == [{"id": b"a", "v": 1}, {"id": b"b", "v": 20}, {"id": b"c", "v": 30}]
