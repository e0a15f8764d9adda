"""Benchmark: a `memwal metrics` read of 1,000 regions against the sensor tick it shares its read with.

A table of `--regions` regions (manifests written directly, as bench/status.py
does; with `--s3`, on SeaweedFS through the suite's counting proxy holding each
request `--delay-ms`), read warm (after a first read) by the exporter
(`TableWatch`) and by the location's flushed-generations sensor, each
`--repeats` times: median seconds and storage requests of each, and their
ratios (aim: the exporter's requests about one per region, as the sensor's,
and at most twice its time).

Usage: python bench/metrics.py [--regions 1000] [--repeats 5] [--s3] [--delay-ms 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

from memwal_core.model.table import MemWalTable  # noqa: E402
from memwal_core.services.watch import TableWatch  # noqa: E402
from memwal_core.storage.options import StorageOptions  # noqa: E402

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"})]
)


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


@contextlib.contextmanager
def table_uri(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, str], Callable[[], int]]]:
    """The table's URI, its storage options, and a count of the requests it has had."""
    from tests.support.regions import write_regions

    with tempfile.TemporaryDirectory() as tmp:
        if not args.s3:
            uri = str(Path(tmp) / "t")
            lance.write_dataset(pa.table({"id": np.arange(1000)}, schema=SCHEMA), uri).initialize_mem_wal()
            write_regions(uri, {}, args.regions, versions=2, generations=1, wal_entries=1, wal_hint=1)
            yield uri, {}, lambda: 0
            return
        from tests.support.proxy import LatencyProxy
        from tests.support.seaweed import SeaweedServer

        with (
            SeaweedServer() as server,
            LatencyProxy(server.ports["s3.port"], delay=args.delay_ms / 1000) as proxy,
        ):
            server.create_bucket("metrics")
            options = proxy.storage_options(server.storage_options())
            uri = "s3://metrics/t"
            data = pa.table({"id": np.arange(1000)}, schema=SCHEMA)
            lance.write_dataset(data, uri, storage_options=options).initialize_mem_wal()
            write_regions(uri, options, args.regions, versions=2, generations=1, wal_entries=1, wal_hint=1)
            yield uri, options, proxy.total


def timed(read: Callable[[], object], requests: Callable[[], int], repeats: int) -> tuple[float, float]:
    """Median seconds and requests of a warm `read` (its first, cold, call not counted)."""
    read()
    seconds, counts = [], []
    for _ in range(repeats):
        before = requests()
        started = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - started)
        counts.append(requests() - before)
    return statistics.median(seconds), statistics.median(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--s3", action="store_true")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()

    from dagster import DagsterInstance, build_sensor_context

    from memwal_pipelines.build import build_definitions
    from memwal_pipelines.config import TableConfig
    from memwal_pipelines.resources import sensor_table
    from memwal_pipelines.sensors import FLUSHED_SENSOR

    with table_uri(args) as (uri, options, proxied):
        os.environ["METRICS_BENCH_OPTIONS"] = json.dumps(options)
        with MemWalTable.open(uri, StorageOptions(options)) as table:
            watch = TableWatch(table)
            readings: list[int] = []

            def read() -> None:
                readings.append(watch.read().requests)

            # On local disk the reads count their own requests (a read resets its store's count).
            exporter = timed(read, proxied if args.s3 else lambda: sum(readings), args.repeats)
        config = TableConfig(name="m", uri=uri, storage_options_env="METRICS_BENCH_OPTIONS")
        definitions = build_definitions([config])
        sensor = definitions.resolve_sensor_def(FLUSHED_SENSOR)
        cursor: list[str | None] = [None]

        def sensor_requests() -> int:
            with sensor_table(config) as opened:  # the table the sensor keeps open, and counts on
                return opened.store.stats.total()

        with DagsterInstance.ephemeral() as instance:

            def tick() -> None:
                with build_sensor_context(instance=instance, cursor=cursor[0]) as context:
                    cursor[0] = sensor(context).cursor  # type: ignore[union-attr]

            ticked = timed(tick, proxied if args.s3 else sensor_requests, args.repeats)
    where = f"SeaweedFS through a {args.delay_ms:g} ms proxy" if args.s3 else "local disk"
    print(f"{args.regions} regions on {where}, warm reads, median of {args.repeats}\n")
    print(f"exporter read (TableWatch)   {exporter[0]:.3f} s  {exporter[1]:.0f} requests  ({load()})")
    print(f"sensor tick                  {ticked[0]:.3f} s  {ticked[1]:.0f} requests  ({load()})")
    ratio = exporter[0] / ticked[0]
    per_region = exporter[1] / args.regions
    print(
        f"exporter / sensor: {ratio:.2f}x the time (aim <= 2x); {per_region:.2f} requests per region (aim ~1)"
    )


if __name__ == "__main__":
    main()
