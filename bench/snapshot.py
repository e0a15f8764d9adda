"""Benchmark: building the region snapshot of 10, 100 and 1,000 regions, on local disk and SeaweedFS.

Region manifests are generated directly (two versions, three generations and
four WAL entries per region, WAL hints current or two entries behind, the
latter needing a probe past the hint in every region), then `build_snapshot` runs several times.
Prints seconds (median) and storage requests per region made by memwal's
object store (Lance's own requests to open and commit the dataset are not
counted). Baseline: `status` of the same table (bench/status.py), which
reads the same region manifests and nothing else.

Usage: python bench/snapshot.py [--regions 10 100 1000] [--repeats 3] [--skip-s3]
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
from memwal_core.model.table import MemWalTable
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from tests.support.regions import write_regions

WAL_ENTRIES = 4


def build_table(uri: str, options: dict[str, str], regions: int, wal_lag: int) -> None:
    base = pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(base, uri, storage_options=options or None).initialize_mem_wal()
    write_regions(
        uri,
        options,
        regions,
        versions=2,
        generations=3,
        wal_entries=WAL_ENTRIES,
        wal_hint=WAL_ENTRIES - wal_lag,
    )


def timed(uri: str, options: dict[str, str], repeats: int, run: str) -> tuple[float, float, str]:
    """Median seconds, requests per region, and where the snapshot went."""
    seconds: list[float] = []
    requests: list[int] = []
    storage = ""
    for _ in range(repeats):
        with MemWalTable(uri, StorageOptions(options)) as table:
            started = time.perf_counter()
            if run == "snapshot":
                result = build_snapshot(table)
                storage = result.storage
                count = result.regions
            else:
                count = len(status(table).regions)
            seconds.append(time.perf_counter() - started)
            requests.append(table.store.stats.total())
    return statistics.median(seconds), statistics.median(requests) / count, storage


def run(where: str, options: dict[str, str], make_uri: str, sizes: list[int], repeats: int) -> None:
    for regions in sizes:
        for wal_lag in (0, 2):
            uri = f"{make_uri}/snapshot-{regions}-{uuid.uuid4().hex[:8]}"
            started = time.perf_counter()
            build_table(uri, options, regions, wal_lag)
            built = time.perf_counter() - started
            report(where, uri, options, regions, wal_lag, repeats, built)


def report(
    where: str, uri: str, options: dict[str, str], regions: int, wal_lag: int, repeats: int, built: float
) -> None:
    snap_s, snap_r, storage = timed(uri, options, repeats, "snapshot")
    base_s, base_r, _ = timed(uri, options, repeats, "status")
    print(
        f"{where:<10} regions={regions:<5} WAL hints {wal_lag} behind  snapshot median {snap_s:.3f} s  "
        f"requests/region {snap_r:.2f}  "
        f"({storage})  | baseline status {base_s:.3f} s, {base_r:.2f} req/region  "
        f"ratio {snap_s / base_s:.2f}x time  (table built in {built:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        run("local", {}, tmp, args.regions, args.repeats)
    if args.skip_s3:
        return
    from tests.support.seaweed import SeaweedServer

    with SeaweedServer() as server:
        server.create_bucket("bench")
        run("seaweedfs", server.storage_options(), "s3://bench", args.regions, args.repeats)


if __name__ == "__main__":
    main()
