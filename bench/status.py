"""Benchmark: `status` of a table with many regions, on local disk and on SeaweedFS.

Region manifests are generated directly (a few versions and generations per
region, current hints), then `status` runs several times. Prints seconds
(median) and storage requests per region made by memwal's object store
(Lance's own requests to open the dataset are not counted).

Usage: python bench/status.py [--regions 1000] [--repeats 5] [--skip-s3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.demo import DEMO_SCHEMA
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import uuid_to_proto
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions

VERSIONS_PER_REGION = 3
GENERATIONS_PER_REGION = 4


def build_table(uri: str, options: dict[str, str], regions: int) -> None:
    """A MemWAL table whose `regions` regions each have a few manifest versions."""
    base = pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(base, uri, storage_options=options or None).initialize_mem_wal()
    table = MemWalTable(uri, options)

    def write_region(region: str) -> None:
        store = RegionManifestStore(table.store, region)
        for version in range(1, VERSIONS_PER_REGION + 1):
            generations = GENERATIONS_PER_REGION - VERSIONS_PER_REGION + version
            message = pb.ShardManifest(
                version=version,
                writer_epoch=1,
                current_generation=generations + 1,
                shard_id=uuid_to_proto(region),
                sstables=[
                    pb.SsTable(generation=g, path=f"{g:08x}_gen_{g}") for g in range(1, generations + 1)
                ],
            )
            table.store.put_if_not_exists(store.path(version), message.SerializeToString())
        table.store.write(f"{store.dir}/version_hint.json", f'{{"version":{VERSIONS_PER_REGION}}}'.encode())

    table.store.map(write_region, [str(uuid.uuid4()) for _ in range(regions)])
    table.close()


def measure(uri: str, options: dict[str, str], regions: int, repeats: int) -> dict[str, float]:
    seconds: list[float] = []
    requests: list[int] = []
    for _ in range(repeats):
        with MemWalTable(uri, StorageOptions(options)) as table:
            started = time.perf_counter()
            result = status(table)
            seconds.append(time.perf_counter() - started)
            requests.append(table.store.stats.total())
            assert len(result.regions) == regions, len(result.regions)
            assert all(r.manifest_version == VERSIONS_PER_REGION for r in result.regions)
    return {
        "seconds_median": statistics.median(seconds),
        "seconds_min": min(seconds),
        "requests_per_region": statistics.median(requests) / regions,
    }


def report(where: str, regions: int, figures: dict[str, float]) -> None:
    print(
        f"{where:<10} regions={regions:<5} status median {figures['seconds_median']:.2f} s "
        f"(min {figures['seconds_min']:.2f} s)  requests/region {figures['requests_per_region']:.2f}  "
        f"aim: <= 3 requests/region, < 5 s on SeaweedFS"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "table")
        started = time.perf_counter()
        build_table(uri, {}, args.regions)
        print(f"local      built {args.regions} regions in {time.perf_counter() - started:.1f} s")
        report("local", args.regions, measure(uri, {}, args.regions, args.repeats))

    if args.skip_s3:
        return
    from tests.support.seaweed import SeaweedServer

    with SeaweedServer() as server:
        server.create_bucket("bench")
        options = server.storage_options()
        uri = "s3://bench/status-table"
        started = time.perf_counter()
        build_table(uri, options, args.regions)
        print(f"seaweedfs  built {args.regions} regions in {time.perf_counter() - started:.1f} s")
        report("seaweedfs", args.regions, measure(uri, options, args.regions, args.repeats))


if __name__ == "__main__":
    main()
