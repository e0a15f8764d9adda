"""Test helpers for tables: an independent reading of region manifests, and tree hashes.

`independent_latest_manifest` deliberately does NOT use memwal_core's store:
it lists the directory and decodes with protobuf directly, so a test can
compare memwal's answer against a second opinion.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path
from typing import Any

from memwal_core.format.naming import LEASE_DIR
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store


def independent_latest_manifest(table_dir: Path, region: str) -> pb.ShardManifest:
    """The highest-numbered region manifest, found by listing (not probing)."""
    manifest_dir = table_dir / "_mem_wal" / region / "manifest"
    versions = [int(name[:64][::-1], 2) for name in os.listdir(manifest_dir) if name.endswith(".binpb")]
    latest = max(versions)
    name = format(latest, "064b")[::-1] + ".binpb"
    message = pb.ShardManifest()
    message.ParseFromString((manifest_dir / name).read_bytes())
    return message


def tree_digest(root: Path) -> str:
    """A hash of every file's path, size and content under `root`."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def progress_history(uri: str) -> list[dict[str, int]]:
    """Merge progress at every table version that has MemWAL, oldest first."""
    from memwal_core.errors import MemWalNotEnabledError
    from memwal_core.model.table import MemWalTable

    history = []
    with MemWalTable(uri) as table:
        for version in range(1, table.dataset().version + 1):
            try:
                history.append(dict(table.index_details(version).merged))
            except MemWalNotEnabledError:
                continue
    return history


def assert_progress_never_decreases(history: list[dict[str, int]]) -> None:
    """Every region's merge progress is monotone across table versions."""
    for before, after in itertools.pairwise(history):
        for region, generation in before.items():
            assert after.get(region, 0) >= generation, (
                f"progress of {region} went from {generation} to {after.get(region, 0)}"
            )


def lsm_rows_at(uri: str, version: int, columns: list[str]) -> list[dict[str, object]]:
    """What a MemWAL-aware reader sees at table `version`: the base then, plus every generation
    the merge progress recorded then does not cover (Lance's LSM scanner, newest row per key)."""
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.reader import ReadPlan, RegionRead, lsm_scanner

    with MemWalTable.open(uri) as table:
        merged = table.index_details(version).merged
        regions = tuple(
            RegionRead(
                m.region,
                m.spec_id,
                m.current_generation,
                merged.get(m.region, 0),
                tuple(
                    (g.generation, g.path) for g in m.generations if g.generation > merged.get(m.region, 0)
                ),
            )
            for _region, m in sorted(table.read_regions().items())
            if m is not None
        )
        plan = ReadPlan(table.uri, version, None, "manifests", regions)
        rows: list[dict[str, object]] = lsm_scanner(table, plan).project(columns).to_table().to_pylist()
        return rows


def lease_records(uri: str) -> int:
    """How many lease records merges have written so far (the highest record number per region)."""
    root = Path(uri) / LEASE_DIR
    if not root.is_dir():
        return 0
    return sum(max((int(p.stem) for p in d.glob("*.json")), default=0) for d in root.iterdir())


def progress(uri: str) -> dict[str, int]:
    """Each region's merged generation, as `status` reports it."""
    with MemWalTable.open(uri) as table:
        return {r.region: r.merged_generation for r in status(table).regions}


def restore_backlog(uri: str, version: int) -> None:
    """Restore the table to `version` (a benchmark's backlog before it merges) and drop the merge
    leases written since.

    A committed merge does not give its region's lease back: the record names the generation it
    merged, which frees it for any merger that reads progress there. A restore takes progress back
    below it, so that record would count as held for its TTL (a merger in another process on this
    host finds the holder gone at once; the same process does not).
    """
    import lance

    restored: Any = lance.dataset(uri, version=version)
    restored.restore()
    store = open_store(uri, StorageOptions())
    store.delete_trees(
        [f"{LEASE_DIR}/{name}" for name in store.list_dirs(LEASE_DIR) if name.startswith("merge-")]
    )


def add_manifest_versions(table: MemWalTable, count: int) -> None:
    """`count` more same-epoch manifest versions in every region, in order, each put-if-not-exists
    like GC's prune writes one (the versions a week of flushes and prunes leaves, without the data);
    the hint is moved once, at the end."""
    for region in table.region_ids():
        manifests = table.region_store(region)
        message = manifests.read_latest().to_proto()
        for _ in range(count):
            message.version += 1
            manifests.store.put_if_not_exists(manifests.path(message.version), message.SerializeToString())
        manifests.write_hint(message.version)
