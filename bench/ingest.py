"""Benchmark: writing rows through Lance's native writer and through MemWalWriter and ingest.

Local disk, 1,000,000 rows in puts of 10,000: (n) the native `ShardWriter`
putting every batch straight into one region (the baseline); (a)
`MemWalWriter` on a one-region (unsharded) table; (b) `MemWalWriter` routing
the same puts into 4 bucket regions; (w) `MemWalWriter` into 4 regions with
puts that carry as many rows per region as (a)'s carry into its one (a writer
at width: 4 regions' traffic). Each durable and not. Then the cost of routing
alone against (b)'s write time, and (s) the Spark ingestion job from Parquet
files into 4 regions (local[*], the session started before timing).

On S3 (SeaweedFS behind a proxy holding each request `--delay-ms`, 20 by
default): durable puts of 2,500 rows per region they touch, into 1, 4 and 16
regions, through MemWalWriter, and through the native writer into 1 region.
Prints rows/s and the ratios; the aims are (a)/(n) >= 0.9, routing < 5%,
(w)/(a) >= 1.5 on local disk and 16 regions / 1 region >= 4 on S3.

The claim check (a durable write is acknowledged only once no later claim of
its region exists, `model/claim.py`): (b)'s durable puts on local disk and the
16-region S3 puts again, with the check and with it switched off in this
process, runs interleaved; the ratio of their rows/s (aim >= 0.9).

Usage: python bench/ingest.py [--rows 1000000] [--put-rows 10000] [--repeats 3] [--skip-spark] [--skip-s3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.demo import DEMO_SCHEMA
from memwal_core.model.claim import Claim
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


def new_table(root: str, storage: dict[str, str] | None = None, **mode: Any) -> str:
    uri = f"{root}/t-{uuid.uuid4().hex[:8]}"
    seed = pa.table({"id": [-1], "name": ["seed"], "score": [0.0]}, schema=DEMO_SCHEMA)
    lance.write_dataset(seed, uri, storage_options=storage).initialize_mem_wal(**mode)
    return uri


def regions_mode(regions: int) -> dict[str, Any]:
    return {"unsharded": True} if regions == 1 else {"bucket_column": "id", "num_buckets": regions}


REPEATS = 1


def timed(label: str, rows: int, make: Callable[[], str], write: Callable[[str], object]) -> float:
    """The median of REPEATS writes, each into a fresh table made before the clock starts."""
    runs = []
    for _ in range(REPEATS):
        uri = make()
        started = time.perf_counter()
        write(uri)
        runs.append(time.perf_counter() - started)
    seconds = statistics.median(runs)
    print(f"  {label:<52} {seconds:7.2f} s  {rows / seconds:>10,.0f} rows/s  (median of {len(runs)})")
    return seconds


def native(
    parts: list[pa.Table], durable: bool, storage: dict[str, str] | None = None
) -> Callable[[str], None]:
    def write(uri: str) -> None:
        dataset = lance.dataset(uri, storage_options=storage)
        with dataset.mem_wal_writer(str(uuid.uuid4()), durable_write=durable) as writer:
            for part in parts:
                writer.put(part)

    return write


def ours(
    parts: list[pa.Table], durable: bool, copies: int = 1, storage: dict[str, str] | None = None
) -> Callable[[str], None]:
    """MemWalWriter putting each part as `copies` copies under distinct keys (a writer at width: with
    as many copies as regions, each put carries about a part's rows for every region)."""
    if copies > 1:
        # Keys k*copies + c: the bucket hash spreads them evenly over the regions. Made before the clock.
        parts = [
            pa.concat_tables(
                [p.set_column(0, "id", pc.add(pc.multiply(p.column("id"), copies), c)) for c in range(copies)]
            )
            for p in parts
        ]

    def write(uri: str) -> None:
        with MemWalWriter(uri, storage, durable_write=durable) as writer:
            for part in parts:
                writer.put(part)

    return write


@contextlib.contextmanager
def claim_checks(enabled: bool) -> Iterator[None]:
    """MemWalWriter with its claim check, or (only here, to measure it) without."""
    due = Claim.due
    if not enabled:
        Claim.due = lambda self: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        Claim.due = due  # type: ignore[method-assign]


def claim_check_ratio(label: str, rows: int, make: Callable[[], str], write: Callable[[str], object]) -> None:
    """Rows/s with the claim check against without, REPEATS interleaved runs of each."""
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(REPEATS):
        for enabled in (False, True):
            uri = make()
            with claim_checks(enabled):
                started = time.perf_counter()
                write(uri)
                runs[enabled].append(time.perf_counter() - started)
    with_check, without = (statistics.median(runs[e]) for e in (True, False))
    print(
        f"  {label:<52} {rows / with_check:>10,.0f} rows/s checked, {rows / without:>10,.0f} unchecked: "
        f"{without / with_check:.2f} (aim >= 0.9)"
    )


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


def s3_rows(parts: list[pa.Table], args: argparse.Namespace) -> None:
    """Durable puts of a quarter part per region into 1, 4 and 16 regions on S3 behind a latency proxy."""
    from tests.support.proxy import LatencyProxy
    from tests.support.seaweed import SeaweedServer

    per_region = [p.slice(0, p.num_rows // 4) for p in parts[: args.s3_puts]]
    rows = sum(p.num_rows for p in per_region)
    print(
        f"S3 through a {args.delay_ms:g} ms proxy: {len(per_region)} durable puts of {rows // len(per_region):,} rows per region, open to close"
    )
    with (
        SeaweedServer() as server,
        LatencyProxy(server.ports["s3.port"], delay=args.delay_ms / 1000) as proxy,
    ):
        server.create_bucket("ingest")
        storage = proxy.storage_options(server.storage_options())

        def make(regions: int) -> Callable[[], str]:
            return lambda: new_table("s3://ingest", storage, **regions_mode(regions))

        native_seconds = timed(
            "(n) native ShardWriter, 1 region", rows, make(1), native(per_region, True, storage)
        )
        rates: dict[int, float] = {}
        for regions in (1, 4, 16):
            seconds = timed(
                f"MemWalWriter, {regions} region(s)",
                rows * regions,
                make(regions),
                ours(per_region, True, regions, storage),
            )
            rates[regions] = rows * regions / seconds
        print(f"  MemWalWriter 1 region / native 1 region: {rates[1] * native_seconds / rows:.2f}")
        print(f"  4 regions / 1 region: {rates[4] / rates[1]:.2f}")
        print(f"  16 regions / 1 region: {rates[16] / rates[1]:.2f}  (aim >= 4)")
        print("claim check, durable (with / without)")
        claim_check_ratio(
            "MemWalWriter, 16 regions, S3", rows * 16, make(16), ours(per_region, True, 16, storage)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--put-rows", type=int, default=10_000)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--s3-puts", type=int, default=40, help="puts per S3 run")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    global REPEATS
    REPEATS = args.repeats
    parts = batches(args.rows, args.put_rows)
    print(f"{args.rows:,} rows in puts of {args.put_rows:,}")
    with tempfile.TemporaryDirectory(prefix="memwal-bench-ingest-") as tmp:
        root = str(tmp)

        def make(regions: int) -> Callable[[], str]:
            return lambda: new_table(root, **regions_mode(regions))

        results: dict[str, float] = {}
        for durable in (True, False):
            kind = "durable" if durable else "non-durable"
            print(kind)
            results[f"n-{kind}"] = timed(
                "(n) native ShardWriter, 1 region", args.rows, make(1), native(parts, durable)
            )
            results[f"a-{kind}"] = timed(
                "(a) MemWalWriter, 1 region (unsharded)", args.rows, make(1), ours(parts, durable)
            )
            results[f"b-{kind}"] = timed(
                "(b) MemWalWriter, the same puts over 4 regions", args.rows, make(4), ours(parts, durable)
            )
            # Seconds for (a)'s rows, so every ratio below is one of rows/s.
            results[f"w-{kind}"] = (
                timed(
                    "(w) MemWalWriter, 4 regions, (a)'s rows per region",
                    4 * args.rows,
                    make(4),
                    ours(parts, durable, 4),
                )
                / 4
            )
        routing_uri = make(4)()
        routing = statistics.median(routing_seconds(routing_uri, parts) for _ in range(max(3, REPEATS)))
        print(f"  {'routing alone, 4 regions':<52} {routing:7.2f} s  {args.rows / routing:>10,.0f} rows/s")
        print("claim check, durable (with / without)")
        claim_check_ratio("(b) MemWalWriter, 4 regions, local disk", args.rows, make(4), ours(parts, True))
        print("ratios (rows/s)")
        for kind in ("durable", "non-durable"):
            n, a, b, w = (results[f"{c}-{kind}"] for c in "nabw")
            print(
                f"  {kind}: (a)/(n) {n / a:.2f} (aim >= 0.9); (b)/(n) {n / b:.2f}; (b)/(a) {a / b:.2f}; (w)/(a) {a / w:.2f}"
                + (" (aim >= 1.5)" if kind == "durable" else "")
            )
            print(f"  {kind}: routing share of (b) {100 * routing / b:.1f} % (aim < 5 %)")
        if not args.skip_s3:
            s3_rows(parts, args)
        if not args.skip_spark:
            from memwal_core.services.engine import SparkEngine

            spark = SparkEngine()
            spark.session.range(1).count()  # start the JVM and workers before timing
            source = Path(root) / "source"
            source.mkdir()
            step = max(1, len(parts) // 8)
            for i, start in enumerate(range(0, len(parts), step)):
                pq.write_table(pa.concat_tables(parts[start : start + step]), source / f"{i}.parquet")
            spark_seconds = timed(
                "(s) Spark ingestion from Parquet, 4 regions",
                args.rows,
                make(4),
                lambda uri: ingest(MemWalTable.open(uri), [str(source)], engine=spark),
            )
            print(f"  (s)/(n) rows/s durable: {results['n-durable'] / spark_seconds:.2f}")


if __name__ == "__main__":
    main()
