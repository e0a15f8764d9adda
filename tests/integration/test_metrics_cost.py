"""`memwal metrics` shows what keeping a table costs: the requests memwal's services made, by service
and kind, as their outcome records sum them, and what the table holds by kind as GC's last run found it."""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import lance

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import (
    MEM_WAL_DIR,
    REGION_MANIFEST_DIR,
    REGION_MANIFEST_SUFFIX,
    REGION_WAL_DIR,
    generation_from_dir_name,
)
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.service import merge
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.storage.object_store import REQUEST_KINDS, by_kind
from tests.integration.test_metrics import samples
from tests.support.cli import run_cli

WEEK_AGO = time.time() - 8 * 86_400


def on_disk(uri: str, merged: dict[str, int]) -> dict[str, tuple[int, int | None]]:
    """What the table's MemWAL folders hold by kind, counted file by file."""
    objects: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for region_dir in (Path(uri) / MEM_WAL_DIR).iterdir():
        for child in region_dir.iterdir():
            if child.name == REGION_MANIFEST_DIR:
                kind, files = "region_manifests", list(child.glob(f"*{REGION_MANIFEST_SUFFIX}"))
            elif child.name == REGION_WAL_DIR:
                kind, files = "wal_entries", list(child.iterdir())
            else:
                generation = generation_from_dir_name(child.name)
                assert generation is not None, child
                kind = "pending_generations" if generation > merged[region_dir.name] else "merged_generations"
                files = [f for f in child.rglob("*") if f.is_file()]
            objects[kind] += len(files)
            sizes[kind] += sum(f.stat().st_size for f in files)
    return {kind: (objects[kind], None if kind == "wal_entries" else sizes[kind]) for kind in objects}


def test_metrics_shows_each_services_requests_and_what_gc_found_stored(tmp_path: Path) -> None:
    uri = str(tmp_path / "demo")
    write_demo_table(uri)
    # Each recorded run's requests, by operation, as its result reports them.
    runs: dict[str, list[dict[str, int]]] = {"merge": [], "gc": [], "snapshot": [], "catchup": []}
    with MemWalTable.open(uri) as table:
        first, second, _pending = table.region_ids()
        runs["merge"].append(merge(table, regions=[first]).requests)
    # Only the version after the first merge stays: time travel keeps the second region's merged
    # generations, not the first's.
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    # The merged regions' manifest versions past the fence retention: GC deletes their covered WAL entries
    # and old versions. The pending region's stay, and with them its WAL.
    for region in (first, second):
        for version in Path(uri).glob(
            f"{MEM_WAL_DIR}/{region}/{REGION_MANIFEST_DIR}/*{REGION_MANIFEST_SUFFIX}"
        ):
            os.utime(version, (WEEK_AGO, WEEK_AGO))
    with MemWalTable.open(uri) as table:
        runs["merge"].append(merge(table, regions=[second]).requests)
        collected = gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0))
        report = collected.to_json()
        # What the figures subtract and add: deleted WAL entries, versions and directories, a version written.
        assert report["wal_entries"]["deleted"] and report["manifest_versions_deleted"] and report["deleted"]
        assert {p["region"] for p in report["pruned"] if p["manifest_version"]} == {first}
        runs["gc"] += [
            collected.requests,
            gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0)).requests,
        ]
        gc_ended = time.time()
        runs["snapshot"].append(build_snapshot(table).requests)
        runs["catchup"].append(catchup(table).requests)
        merged = {region: table.index_details().merged_generation(region) for region in table.region_ids()}

    done = run_cli("metrics", uri)
    assert done.returncode == 0, done.stderr
    found = samples(done.stdout)
    requests = {
        (dict(labels)["service"], dict(labels)["kind"]): value
        for labels, value in found["memwal_requests_total"].items()
    }
    for service, results in runs.items():
        counted = Counter[str]()
        for operations in results:
            counted.update(by_kind(operations))
            counted.update({"GET": 1, "PUT": 1})  # the outcome record's read and write
        assert {k: requests[service, k] for k in REQUEST_KINDS} == {k: counted[k] for k in REQUEST_KINDS}, (
            service
        )
    # The exporter's own: its one read, and opening the table before it.
    own = sum(requests["metrics", k] for k in REQUEST_KINDS)
    assert own > total_of(found, "memwal_read_requests") > 0

    expected = on_disk(uri, merged)
    assert all(expected[kind][0] > 0 for kind in expected), expected
    stored = {
        dict(labels)["kind"]: (value, found["memwal_stored_bytes"].get(labels))
        for labels, value in found["memwal_stored_objects"].items()
    }
    # GC counts manifest versions without listing them: their bytes are the count times the average
    # size of the versions it read or looked at.
    (versions, versions_bytes), (on_disk_versions, on_disk_bytes) = (
        stored.pop("region_manifests"),
        expected.pop("region_manifests"),
    )
    assert versions == on_disk_versions
    assert versions_bytes is not None and on_disk_bytes is not None
    assert abs(versions_bytes - on_disk_bytes) <= 0.15 * on_disk_bytes, (versions_bytes, on_disk_bytes)
    assert stored == expected
    (as_of,) = found["memwal_stored_as_of_timestamp_seconds"].values()
    assert gc_ended - 60 < as_of <= gc_ended


def total_of(found: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> float:
    return sum(found[name].values())
