"""Hostile storage: every kind of damage x every maintenance command, through the real CLI.

One realistic table is built once (Lance's own MemWAL writer, three regions,
a merged prefix GC may delete, a pending backlog, a re-claimed region with more
than a WAL tail of entries, leases left by earlier runs, two base-table
versions). Each (damage, command) pair runs on its own copy, all of them in
parallel subprocesses (`python -m memwal_core.cli.main ... --json`). For every
pair:

- the exit status is the expected one: 2 for corrupt input, 0 only where the
  command does not read the damaged object, and then its JSON equals the JSON
  of the same command on an undamaged copy;
- a refusal is exactly one line `memwal <command>: error: ...` on stderr that
  names the damaged path; the only other lines allowed are the per-region
  progress lines (the CLI's documented output when stderr is not a terminal)
  of the other regions, and never a traceback;
- a command refused as a whole changed nothing (a digest of the whole tree);
- a command that isolates regions (merge, gc) still processed the others
  exactly as on the undamaged copy, printed its JSON, and left the damaged
  region's files and merge progress alone;
- GC never deleted a pending (unmerged) generation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import LEASE_DIR, region_manifest_name
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.merge.batch_merge import DEFAULT_LEASE_TTL
from memwal_core.services.merge.service import merge
from memwal_core.services.retain import retain
from memwal_core.services.snapshot.service import build_snapshot
from tests.support.cli import timed_cli
from tests.support.tables import independent_latest_manifest, tree_digest

COMMANDS: dict[str, list[str]] = {
    "status": [],
    "merge": [],
    "gc": ["--grace-seconds", "0"],
    "snapshot": [],
    "catchup": [],
    "compact": [],
}
# Commands that fail a damaged region alone and go on with the others.
ISOLATING = ("merge", "gc")
MERGED_BEFORE = 3
PENDING_PROBE = MERGED_BEFORE + 2  # the pending generation the generation damages hit
# Subprocesses at once: each is mostly Python start-up and small I/O.
WORKERS = 3
# Keys of a command's JSON that differ between two runs of the same work.
VOLATILE = re.compile(r"^seconds|_seconds$|^snapshot_ts_millis$|^requests$")


@dataclass(frozen=True)
class Pristine:
    """The undamaged table, its regions, and each command's JSON on an undamaged copy."""

    path: Path
    regions: list[str]
    reference: dict[str, dict[str, Any]]


def normalized(payload: Any, table: Path) -> Any:
    """`payload` with the table's path replaced and the timing fields dropped."""
    if isinstance(payload, dict):
        return {k: normalized(v, table) for k, v in payload.items() if not VOLATILE.search(k)}
    if isinstance(payload, list):
        return [normalized(v, table) for v in payload]
    if isinstance(payload, str):
        return payload.replace(str(table), "<table>")
    return payload


def run_command(table: Path, command: str) -> tuple[int, str, str, float]:
    done, seconds = timed_cli([command, str(table), "--json", *COMMANDS[command]])
    return done.returncode, done.stdout, done.stderr, seconds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """Three regions of 20 generations, 3 merged and caught up, old versions cleaned, one later version."""
    root = tmp_path_factory.mktemp("hostile")
    path = root / "pristine"
    log = write_demo_table(str(path), base_rows=120, regions=3, rounds=10, rows_per_generation=10)
    lance.dataset(str(path)).create_scalar_index("id", "BTREE")
    with MemWalTable.open(str(path)) as table:
        merge(table, max_generations=MERGED_BEFORE)
        catchup(table)
        # Only versions with this progress stay, so GC may delete the merged generations ...
        retain(table, older_than=timedelta(0), force=True)
        # ... and a second version gives GC an older manifest to read.
        build_snapshot(table)
    copies = {command: root / f"reference-{command}" for command in COMMANDS}
    for copy in copies.values():
        shutil.copytree(path, copy)
    reference = {}
    with ThreadPoolExecutor(WORKERS) as pool:
        for command, (code, out, err, _s) in zip(
            COMMANDS, pool.map(lambda c: run_command(copies[c], c), COMMANDS), strict=True
        ):
            assert code == 0, f"{command} on the undamaged table: {err}"
            reference[command] = normalized(json.loads(out), copies[command])
    for copy in copies.values():
        shutil.rmtree(copy)
    return Pristine(path, sorted(log.regions), reference)


# -- the damages -----------------------------------------------------------------------------


def garble(path: Path) -> None:
    path.write_bytes(b"\xff\xfe this is not what it claims to be \x00\x01" * 3)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def latest_region_manifest(table: Path, region: str) -> Path:
    version = independent_latest_manifest(table, region).version
    return table / "_mem_wal" / region / "manifest" / region_manifest_name(version)


def pending_generation(table: Path, region: str) -> Path:
    manifest = independent_latest_manifest(table, region)
    listed = {s.generation: s.path for s in manifest.sstables}
    return table / "_mem_wal" / region / listed[PENDING_PROBE]


def generation_data(table: Path, region: str) -> Path:
    return next((pending_generation(table, region) / "data").iterdir())


def newest_lease_record(table: Path, lease: str) -> Path:
    return max((table / LEASE_DIR / lease).iterdir())


def table_manifests(table: Path) -> list[Path]:
    """The base table's manifests, newest first (Lance's V2 names count down)."""
    return sorted(p for p in (table / "_versions").iterdir() if p.suffix == ".manifest")


def damaging(
    action: Callable[[Path], None], target: Callable[[Path, str], Path]
) -> Callable[[Path, str], Path]:
    """Apply `action` to the object `target` finds; the path an error must name is that object."""

    def apply(table: Path, region: str) -> Path:
        path = target(table, region)
        action(path)
        return path

    return apply


def delete_latest_manifest(table: Path, region: str) -> Path:
    latest_region_manifest(table, region).unlink()
    return table / "_mem_wal" / region / "manifest"


def delete_manifest_dir(table: Path, region: str) -> Path:
    shutil.rmtree(table / "_mem_wal" / region / "manifest")
    return table / "_mem_wal" / region / "manifest"


def delete_generation(table: Path, region: str) -> Path:
    path = pending_generation(table, region)
    shutil.rmtree(path)
    return path


def garble_generation(action: Callable[[Path], None]) -> Callable[[Path, str], Path]:
    """Damage the pending generation's data file; errors name the generation's directory."""

    def apply(table: Path, region: str) -> Path:
        action(generation_data(table, region))
        return pending_generation(table, region)

    return apply


@dataclass(frozen=True)
class Damage:
    """One kind of damage: where it hits, and the exit status of each command that must refuse it.

    A command not in `refused` does not read the damaged object: it must exit 0
    with the same JSON as on the undamaged table.
    """

    name: str
    apply: Callable[[Path, str], Path]
    refused: dict[str, int]
    # Which region it hits: the first one, or none (table-wide).
    hits: str = "first"


REGION_METADATA = {"status": 2, "merge": 2, "gc": 2, "snapshot": 2}
DAMAGES = [
    Damage("region manifest truncated", damaging(truncate, latest_region_manifest), REGION_METADATA),
    Damage("region manifest garbled", damaging(garble, latest_region_manifest), REGION_METADATA),
    Damage("region manifest zeroed", damaging(zero, latest_region_manifest), REGION_METADATA),
    Damage("latest region manifest deleted", delete_latest_manifest, REGION_METADATA),
    Damage("region manifest directory deleted", delete_manifest_dir, REGION_METADATA),
    Damage("generation data garbled", garble_generation(garble), {"merge": 2}),
    Damage("generation data truncated", garble_generation(truncate), {"merge": 2}),
    Damage("generation missing", delete_generation, {"merge": 2}),
    Damage(
        "merge lease record garbled",
        damaging(garble, lambda t, r: newest_lease_record(t, f"merge-{r}")),
        {"merge": 2},
    ),
    Damage(
        "merge lease record zeroed",
        damaging(zero, lambda t, r: newest_lease_record(t, f"merge-{r}")),
        {"merge": 2},
    ),
    Damage(
        "index-details lease record garbled",
        damaging(garble, lambda t, r: newest_lease_record(t, "index-details")),
        {"merge": 2, "snapshot": 2, "compact": 2},
        hits="table",
    ),
    Damage(
        "table manifest garbled",
        damaging(garble, lambda t, r: table_manifests(t)[0]),
        dict.fromkeys(COMMANDS, 2),
        hits="table",
    ),
    Damage(
        "older table manifest garbled",
        damaging(garble, lambda t, r: table_manifests(t)[-1]),
        {"gc": 2},
        hits="table",
    ),
]


@dataclass(frozen=True)
class Run:
    """One command on one damaged copy: what it printed and what the tree looked like around it."""

    table: Path
    region: str | None
    damaged: Path
    code: int
    stdout: str
    stderr: str
    seconds: float
    digest_before: str
    digest_after: str
    region_digest_before: str | None
    region_digest_after: str | None
    # Generation directories above the merged prefix, before the run, and those still there after.
    pending_before: frozenset[Path]
    pending_after: frozenset[Path]


def generation_dirs_above(table: Path, regions: list[str], merged: int) -> frozenset[Path]:
    found = set()
    for region in regions:
        region_dir = table / "_mem_wal" / region
        for child in region_dir.iterdir():
            if "_gen_" in child.name and int(child.name.rsplit("_", 1)[1]) > merged:
                found.add(child)
    return frozenset(found)


def run_case(pristine: Pristine, workdir: Path, damage: Damage, command: str) -> Run:
    table = workdir / f"{damage.name.replace(' ', '-')}-{command}"
    shutil.copytree(pristine.path, table)
    region = {"first": pristine.regions[0], "table": None}[damage.hits]
    damaged = damage.apply(table, region or "")
    region_dir = table / "_mem_wal" / region if region else None
    region_digest = (lambda: tree_digest(region_dir)) if region_dir else (lambda: None)
    digest_before, region_before = tree_digest(table), region_digest()
    pending_before = generation_dirs_above(table, pristine.regions, MERGED_BEFORE)
    code, out, err, seconds = run_command(table, command)
    return Run(
        table,
        region,
        damaged,
        code,
        out,
        err,
        seconds,
        digest_before,
        tree_digest(table),
        region_before,
        region_digest(),
        pending_before,
        generation_dirs_above(table, pristine.regions, MERGED_BEFORE),
    )


@pytest.fixture(scope="module")
def matrix(pristine: Pristine, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Run]:
    """Every (damage, command) pair, run in parallel once for the whole module."""
    workdir = tmp_path_factory.mktemp("damaged")
    pairs = [(damage, command) for damage in DAMAGES for command in COMMANDS]
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = list(pool.map(lambda pair: run_case(pristine, workdir, *pair), pairs))
    return {(damage.name, command): run for (damage, command), run in zip(pairs, runs, strict=True)}


def merged_progress(table: Path) -> dict[str, int]:
    with MemWalTable.open(str(table)) as opened:
        return dict(opened.index_details().merged)


def of_regions(entries: list[dict[str, Any]], regions: set[str]) -> list[dict[str, Any]]:
    return [e for e in entries if e["region"] in regions]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", DAMAGES, ids=[d.name.replace(" ", "-") for d in DAMAGES])
def test_damage(damage: Damage, command: str, pristine: Pristine, matrix: dict[tuple[str, str], Run]) -> None:
    run = matrix[(damage.name, command)]
    lines = run.stderr.splitlines()
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in lines if line.startswith(f"memwal {command}: ")]
    others = [line for line in lines if line not in errors]
    healthy = [r for r in pristine.regions if r != run.region]
    expected = damage.refused.get(command, 0)
    # Only the per-region progress lines of the regions that went on.
    went_on = tuple(f"region {r}: " for r in (healthy if expected else pristine.regions))
    assert all(command in ISOLATING and line.startswith(went_on) for line in others), run.stderr
    assert run.pending_after == run.pending_before, "a pending generation was deleted"
    assert run.code == expected, run.stderr
    if expected == 0:
        assert errors == [], run.stderr
        result = normalized(json.loads(run.stdout), run.table)
        reference = pristine.reference[command]
        if command == "catchup" and damage.refused is REGION_METADATA:
            # Catch-up reads regions only to check a new index's coverage: there the damaged region
            # is named, new indexes wait for it, and everything else is as without the damage.
            listing, wanted = result.pop("maintained_list"), reference["maintained_list"]
            unreadable = listing["unreadable_regions"]
            assert [u["region"] for u in unreadable] == [run.region] and run.region in unreadable[0]["error"]
            assert listing["added"] == [] and set(listing["waiting"]) == set(wanted["waiting"]) | set(
                wanted["added"]
            )
            reference = {k: v for k, v in reference.items() if k != "maintained_list"}
        assert result == reference
        return
    assert len(errors) == 1, run.stderr
    line = errors[0]
    assert line.startswith(f"memwal {command}: error: "), line
    assert str(run.damaged) in line, line
    if run.region is not None:
        assert run.region in line, line
    if whole_run_refused(run.stdout):
        assert run.digest_after == run.digest_before, "a refused command changed the table"
        return
    # Isolated: the damaged region alone failed; the others went on exactly as without the damage.
    assert command in ISOLATING and run.region is not None, run.stdout
    report = json.loads(run.stdout)
    assert [f["region"] for f in report["failures"]] == [run.region]
    assert run.region_digest_after == run.region_digest_before, "the damaged region was touched"
    assert merged_progress(run.table)[run.region] == MERGED_BEFORE
    others_set = set(healthy)
    reference = pristine.reference[command]
    result = normalized(report, run.table)
    if command == "merge":
        assert of_regions(result["regions"], others_set) == of_regions(reference["regions"], others_set)
        assert result["regions_merged"] == len(healthy)
        assert all(merged_progress(run.table)[r] > MERGED_BEFORE for r in healthy)
    else:
        assert result["deleted"] == of_regions(reference["deleted"], others_set)
        assert of_regions(result["deleted"], {run.region}) == []


def test_every_refusal_is_fast(matrix: dict[tuple[str, str], Run]) -> None:
    """A damaged object is found without retries or waits: no refusal takes long, even on a loaded machine."""
    refused = {pair: run for pair, run in matrix.items() if run.code != 0}
    slowest_pair, slowest = max(refused.items(), key=lambda item: item[1].seconds)
    assert slowest.seconds < 60, (slowest_pair, slowest.seconds)


def test_retain_refuses_an_older_table_manifest_it_cannot_read(pristine: Pristine, tmp_path: Path) -> None:
    """Lance lists versions by reading every manifest: a garbled old one is corrupt input, named, not a crash."""
    table = tmp_path / "table"
    shutil.copytree(pristine.path, table)
    damaged = table_manifests(table)[-1]
    garble(damaged)
    before = tree_digest(table)
    done, _seconds = timed_cli(["retain", str(table), "--older-than", "1h"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and str(damaged) in done.stderr, done.stderr
    assert done.stderr.startswith("memwal retain: error: "), done.stderr
    assert tree_digest(table) == before


@pytest.mark.parametrize("lease", ["merge-{region}", "index-details"])
def test_a_damaged_lease_record_older_than_its_ttl_is_taken_over(
    lease: str, pristine: Pristine, tmp_path: Path
) -> None:
    """A damaged record does not stop merges for good: one TTL after it was written, a merger takes it."""
    table = tmp_path / "table"
    shutil.copytree(pristine.path, table)
    record = newest_lease_record(table, lease.format(region=pristine.regions[0]))
    garble(record)
    written = time.time() - DEFAULT_LEASE_TTL - 1
    os.utime(record, (written, written))
    code, out, err, _seconds = run_command(table, "merge")
    assert code == 0, err
    assert normalized(json.loads(out), table) == pristine.reference["merge"]
    lines = err.splitlines()
    progress = [line for line in lines if line.startswith("region ")]
    assert len(progress) == len(pristine.regions)
    assert [line for line in lines if line not in progress] == [
        f"lease record {record} was unreadable and older than the lease's {DEFAULT_LEASE_TTL:g} s TTL: taken over"
    ]


def whole_run_refused(stdout: str) -> bool:
    """No report, or `--json`'s one object for a run refused as a whole (its one failure names no region)."""
    if not stdout:
        return True
    report = json.loads(stdout)
    return [f["region"] for f in report["failures"]] == [None] and report["new_version"] is None
