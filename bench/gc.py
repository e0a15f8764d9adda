"""Benchmark: `gc` of a table with 100 regions and 10,000 merged generations, local disk and SeaweedFS.

Generations are cheap copies of one tiny Lance dataset; region manifests
(one version per flush, as Lance's writer leaves them), WAL entries and the
merge progress (progress-only merge commits, then Lance's version cleanup)
are real. One GC run with no grace period, planned as if the fence retention had
passed (a week on), prunes every generation, deletes its directory, the
covered WAL entries and all but the newest 10 manifest versions; a second
run finds nothing to do. Prints plan and execute seconds
and memwal's storage requests per deleted generation (Lance's own requests to
open the dataset are not counted), and the ratio to deleting every object
with its own request (the naive baseline).

Usage: python bench/gc.py [--regions 100] [--generations 100] [--skip-s3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.demo import DEMO_SCHEMA
from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, wal_entry_name
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import uuid_to_proto
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.plan import plan_gc
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import GcResult, execute_gc
from memwal_core.services.merge.commit import commit_region
from memwal_core.storage.options import StorageOptions

POLICY = GcPolicy(grace_seconds=0, keep_manifest_versions=10)


def gc_after_retention(table: MemWalTable) -> GcResult:
    """A GC run as it goes once the fence retention has passed: the WAL and old manifest versions too."""
    table.store.stats.reset()
    started = time.perf_counter()
    later = time.time() + POLICY.fence_retention_seconds + 60
    return execute_gc(table, plan_gc(table, POLICY, now=later), dry_run=False, started=started)


def template_files(tmp: Path) -> dict[str, bytes]:
    """The files of one tiny flushed-generation-like Lance dataset, by relative path."""
    root = tmp / "template"
    rows = pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(rows, str(root))
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def wal_entry(generation: int) -> bytes:
    schema = pa.schema(
        [pa.field("id", pa.int64())], metadata={"writer_epoch": "1", "generation": str(generation)}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.table({"id": [generation]}, schema=schema))
    return bytes(sink.getvalue().to_pybytes())


def build_table(
    uri: str, options: dict[str, str], regions: int, generations: int, files: dict[str, bytes]
) -> None:
    base = pa.table({"id": [0], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(base, uri, storage_options=options or None).initialize_mem_wal()
    table = MemWalTable(uri, StorageOptions(options))
    store = table.store
    ids = [str(uuid.uuid4()) for _ in range(regions)]

    def write_region(region: str) -> None:
        manifests = table.region_store(region)
        region_dir = f"{MEM_WAL_DIR}/{region}"
        sstables: list[pb.SsTable] = []
        for version in range(1, generations + 2):
            if version > 1:
                g = version - 1
                name = f"{uuid.uuid4().hex[:8]}_gen_{g}"
                for rel, data in files.items():
                    store.write(f"{region_dir}/{name}/{rel}", data)
                store.put_if_not_exists(f"{region_dir}/{REGION_WAL_DIR}/{wal_entry_name(g)}", wal_entry(g))
                sstables.append(pb.SsTable(generation=g, path=name))
            message = pb.ShardManifest(
                version=version,
                writer_epoch=1,
                replay_after_wal_entry_position=version - 1,
                current_generation=version,
                shard_id=uuid_to_proto(region),
                sstables=sstables,
            )
            store.put_if_not_exists(manifests.path(version), message.SerializeToString())
        manifests.write_hint(generations + 1)

    store.map(write_region, ids)
    empty = pa.table(
        {
            "id": pa.array([], pa.int64()),
            "name": pa.array([], pa.string()),
            "score": pa.array([], pa.float64()),
        }
    )
    for region in ids:
        commit_region(
            table.dataset(), ["id"], region, generations, empty, empty.select(["id"]), use_index=False
        )
    lance.dataset(uri, storage_options=options or None).cleanup_old_versions(older_than=timedelta(0))
    table.close()


def measure(
    where: str, uri: str, options: dict[str, str], regions: int, generations: int, per_gen_objects: int
) -> None:
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        result = gc_after_retention(table)
        payload = result.to_json()
        deleted = len(payload["deleted"])
        assert deleted == regions * generations, deleted
        assert not payload["failures"], payload["failures"]
        requests = sum(result.requests.values())
        per_gen = requests / deleted
        # Naive: one request per deleted object, plus the same planning reads.
        naive = per_gen_objects + 2  # generation files, its WAL entry, its manifest version
        print(
            f"{where:<10} {regions} regions, {deleted} generations deleted: plan {result.seconds_plan:.2f} s, "
            f"execute {result.seconds_execute:.2f} s; {requests} requests = {per_gen:.2f} per generation "
            f"(naive per-object deletes: {naive} per generation, ratio {per_gen / naive:.2f}); "
            f"{payload['wal_entries']['deleted']} WAL entries, {payload['manifest_versions_deleted']} manifest versions"
        )
        print(f"{'':<10} requests by kind: {dict(sorted(result.requests.items()))}")
        again = gc_after_retention(table)
        print(
            f"{'':<10} second run (nothing to do): plan {again.seconds_plan:.2f} s, "
            f"{sum(again.requests.values()) / regions:.1f} requests/region"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=100)
    parser.add_argument("--generations", type=int, default=100, help="merged generations per region")
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        files = template_files(Path(tmp))
        uri = str(Path(tmp) / "table")
        started = time.perf_counter()
        build_table(uri, {}, args.regions, args.generations, files)
        print(
            f"local      built in {time.perf_counter() - started:.1f} s ({len(files)} files per generation)"
        )
        measure("local", uri, {}, args.regions, args.generations, len(files))

    if args.skip_s3:
        return
    from tests.support.seaweed import SeaweedServer

    with SeaweedServer() as server, tempfile.TemporaryDirectory() as tmp:
        server.create_bucket("bench")
        options = server.storage_options()
        uri = "s3://bench/gc-table"
        started = time.perf_counter()
        build_table(uri, options, args.regions, args.generations, files)
        print(f"seaweedfs  built in {time.perf_counter() - started:.1f} s")
        measure("seaweedfs", uri, options, args.regions, args.generations, len(files))


if __name__ == "__main__":
    main()
