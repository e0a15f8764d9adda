"""Benchmark: peak memory of the other services where a backlog, a region count or a file grows.

Each command runs in its own process, which reports its own peak resident
memory (VmHWM), at two sizes 10x apart:

- `gc --dry-run` (planning only) over merged generations: 10 regions of
  100 and of 1,000 generations (`bench/gc.py`'s table);
- `status` and `snapshot` over 1,000 and 10,000 regions (manifests written
  directly, as in `bench/snapshot.py`);
- `ingest` of one Parquet file of 200,000 and of 2,000,000 rows into a
  table of 4 buckets.

Usage: python bench/service_memory.py [--small 1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gc import build_table as gc_table
from bench.gc import template_files
from memwal_core.demo import DEMO_SCHEMA
from tests.support.peak_rss import command_peak_mib
from tests.support.regions import write_regions


def regions_table(uri: str, regions: int) -> None:
    base = pa.table({"id": [1], "name": ["x"], "score": [1.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(base, uri).initialize_mem_wal()
    write_regions(uri, {}, regions, versions=2, generations=3)


def ingest_source(work: Path, rows: int) -> tuple[str, str]:
    """A table of 4 buckets on `id`, and a Parquet file of `rows` new rows for it."""
    uri = str(work / f"ingest-{rows}")
    seed = pa.table({"id": [-1], "name": ["seed"], "score": [0.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(seed, uri).initialize_mem_wal(bucket_column="id", num_buckets=4)
    keys = pa.array(range(rows), pa.int64())
    names = pa.array([f"name-{k}" for k in range(rows)])
    path = str(work / f"rows-{rows}.parquet")
    pq.write_table(pa.table({"id": keys, "name": names, "score": keys.cast(pa.float64())}), path)
    return uri, path


def measure(work: Path, label: str, sizes: tuple[int, int], run: Callable[[int], list[str]]) -> None:
    peaks = [command_peak_mib(work, *run(size))[0] for size in sizes]
    print(
        f"| {label} | {sizes[0]:,}: {peaks[0]} MiB | {sizes[1]:,}: {peaks[1]} MiB | "
        f"{(peaks[1] - peaks[0]) / (sizes[1] - sizes[0]) * 1024:.2f} KiB per unit |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1, help="divide every size by this (a quick run)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        files = template_files(work)
        print("| command | smaller | 10x larger | growth |")
        print("|---|---|---|---|")

        def gc_plan(generations: int) -> list[str]:
            uri = str(work / f"gc-{generations}")
            gc_table(uri, {}, 10, generations, files)
            return ["gc", uri, "--dry-run", "--grace-seconds", "0"]

        measure(work, "gc --dry-run (generations per region, 10 regions)", (100, 1000), gc_plan)
        for command in ("status", "snapshot"):

            def regions_run(regions: int, command: str = command) -> list[str]:
                uri = str(work / f"regions-{regions}")
                if not Path(uri).exists():
                    regions_table(uri, regions)
                return [command, uri]

            measure(work, f"{command} (regions)", (1000 // args.small, 10_000 // args.small), regions_run)

        def ingest_run(rows: int) -> list[str]:
            uri, path = ingest_source(work, rows)
            return ["ingest", uri, path]

        measure(
            work, "ingest (rows of one file)", (200_000 // args.small, 2_000_000 // args.small), ingest_run
        )


if __name__ == "__main__":
    main()
