"""Benchmark: writing 1,000,000 rows through Lance's native writer and through MemWalWriter and ingest.

(n) the native `ShardWriter` putting every batch straight into one region
(the baseline); (a) `MemWalWriter` on a one-region (unsharded) table;
(b) `MemWalWriter` routing into 4 bucket regions; each durable and not.
Then the cost of routing alone (region values, grouping, region lookup)
against (b)'s write time, and (s) the Spark ingestion job from Parquet
files into 4 regions (local[*], the session started before timing).
Prints rows/s and the ratios; the aims are (a)/(n) >= 0.9 and routing < 5%.

Usage: python bench/ingest.py [--rows 1000000] [--put-rows 10000] [--repeats 3] [--skip-spark]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.demo import DEMO_SCHEMA
from memwal_core.model.region_directory import RegionDirectory
from memwal_core.model.routing import partition_by_code, region_spec_of
from memwal_core.model.table import MemWalTable
from memwal_core.services.ingest.service import ingest
from memwal_core.services.writer import MemWalWriter


def batches(rows: int, put_rows: int) -> list[pa.Table]:
    keys = pa.array(range(rows), pa.int64())
    table = pa.table(
        {
            "id": keys,
            "name": pa.array([f"name-{k}" for k in range(rows)]),
            "score": pa.array(range(rows), pa.float64()),
        },
        schema=DEMO_SCHEMA,
    )
    return [table.slice(i, put_rows) for i in range(0, rows, put_rows)]


def new_table(root: Path, **mode: Any) -> str:
    uri = str(root / f"t-{uuid.uuid4().hex[:8]}")
    seed = pa.table({"id": [-1], "name": ["seed"], "score": [0.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(seed, uri).initialize_mem_wal(**mode)
    return uri


REPEATS = 1


def timed(label: str, rows: int, run: Callable[[], None]) -> float:
    """The median of REPEATS runs (each on a fresh table): this machine's neighbours are noisy."""
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        runs.append(time.perf_counter() - started)
    seconds = statistics.median(runs)
    print(f"  {label:<44} {seconds:7.2f} s  {rows / seconds:>10,.0f} rows/s  (median of {len(runs)})")
    return seconds


def native(uri: str, parts: list[pa.Table], durable: bool) -> None:
    with lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), durable_write=durable) as writer:
        for part in parts:
            writer.put(part)


def ours(uri: str, parts: list[pa.Table], durable: bool) -> None:
    with MemWalWriter(uri, durable_write=durable) as writer:
        for part in parts:
            writer.put(part)


def routing_seconds(uri: str, parts: list[pa.Table]) -> float:
    """What MemWalWriter adds per put before Lance sees the rows: region values, grouping, region lookup."""
    table = MemWalTable.open(uri)
    spec = region_spec_of(table.latest)
    assert spec is not None
    directory = RegionDirectory(table, spec)
    started = time.perf_counter()
    for part in parts:
        codes, keys = spec.route(part)
        for key, _rows in zip(keys, partition_by_code(part, codes, len(keys)), strict=True):
            directory.region_for(key)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--put-rows", type=int, default=10_000)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    global REPEATS
    REPEATS = args.repeats
    parts = batches(args.rows, args.put_rows)
    print(f"{args.rows:,} rows in puts of {args.put_rows:,}")
    with tempfile.TemporaryDirectory(prefix="memwal-bench-ingest-") as tmp:
        root = Path(tmp)
        results: dict[str, float] = {}
        for durable in (True, False):
            kind = "durable" if durable else "non-durable"
            print(kind)
            results[f"n-{kind}"] = timed(
                "(n) native ShardWriter, 1 region",
                args.rows,
                functools.partial(lambda d: native(new_table(root), parts, d), durable),
            )
            results[f"a-{kind}"] = timed(
                "(a) MemWalWriter, 1 region (unsharded)",
                args.rows,
                functools.partial(lambda d: ours(new_table(root, unsharded=True), parts, d), durable),
            )
            results[f"b-{kind}"] = timed(
                "(b) MemWalWriter, 4 bucket regions",
                args.rows,
                functools.partial(
                    lambda d: ours(new_table(root, bucket_column="id", num_buckets=4), parts, d), durable
                ),
            )
        routing_uri = new_table(root, bucket_column="id", num_buckets=4)
        routing = statistics.median(routing_seconds(routing_uri, parts) for _ in range(max(3, REPEATS)))
        print(f"  {'routing alone, 4 regions':<44} {routing:7.2f} s  {args.rows / routing:>10,.0f} rows/s")
        print("ratios")
        for kind in ("durable", "non-durable"):
            print(f"  (a)/(n) rows/s {kind}: {results[f'n-{kind}'] / results[f'a-{kind}']:.2f}  (aim >= 0.9)")
            print(f"  (b)/(n) rows/s {kind}: {results[f'n-{kind}'] / results[f'b-{kind}']:.2f}")
            print(f"  routing share of (b) {kind}: {100 * routing / results[f'b-{kind}']:.1f} %  (aim < 5 %)")
        if not args.skip_spark:
            from memwal_core.services.engine import SparkEngine

            spark = SparkEngine()
            spark.session.range(1).count()  # start the JVM and workers before timing
            source = root / "source"
            source.mkdir()
            for i, part in enumerate(range(0, len(parts), max(1, len(parts) // 8))):
                pq.write_table(
                    pa.concat_tables(parts[part : part + max(1, len(parts) // 8)]), source / f"{i}.parquet"
                )
            uri = new_table(root, bucket_column="id", num_buckets=4)

            def spark_run() -> None:
                ingest(MemWalTable.open(uri), [str(source)], engine=spark)

            spark_seconds = timed("(s) Spark ingestion from Parquet, 4 regions", args.rows, spark_run)
            print(f"  (s)/(n) rows/s durable: {results['n-durable'] / spark_seconds:.2f}")


if __name__ == "__main__":
    main()
