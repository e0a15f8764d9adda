"""Benchmark: a GC dry run's plan of one region as its kept manifest versions grow (issue 46).

One table, one region written by Lance's writer (a few manifest versions), then more versions
(`tests.support.tables.add_manifest_versions`, in order) up to each count of --versions beyond
those. For each count, on local disk and on SeaweedFS, GC's plan (what a dry run does) now
(nothing older than the fence retention) and `aged` (planned as if a week had passed since the
middle version: the anchor is in the middle, found among all of them): its seconds (median of
--repeat, each on a freshly opened table), memwal's requests by kind, the files stat'ed in the
region's manifest folder (local disk) and the HTTP requests a proxy saw (SeaweedFS: one per LIST
page), and the load average. Times the checkout it runs from.

Usage: python bench/gc_versions.py [--versions 0 2000 15000] [--repeat 5] [--skip-s3] [--delay 0.02]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.format.naming import MEM_WAL_DIR, REGION_MANIFEST_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.plan import plan_gc
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.storage.options import StorageOptions
from tests.support.proxy import LatencyProxy
from tests.support.tables import add_manifest_versions

POLICY = GcPolicy()
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
    ]
)


def build(uri: str, options: dict[str, str]) -> str:
    """A table with one region and one flushed generation; the region's id."""
    keys = np.arange(100, dtype=np.int64)
    rows = pa.table({"id": keys, "n": keys}, schema=SCHEMA)
    lance.write_dataset(rows, uri, storage_options=options or None).initialize_mem_wal()
    region = str(uuid.uuid4())
    with lance.dataset(uri, storage_options=options or None).mem_wal_writer(
        region, max_memtable_rows=10_000
    ) as writer:
        writer.put(rows)
    return region


@contextmanager
def stats_under(folder: str) -> Iterator[list[str]]:
    """The paths under `folder` this process stats meanwhile (the calls themselves run)."""
    seen: list[str] = []
    real = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith(folder):
            seen.append(str(path))
        return real(path, *args, **kwargs)

    os.stat = stat
    try:
        yield seen
    finally:
        os.stat = real


def plan_once(uri: str, options: dict[str, str], now: float | None) -> tuple[float, dict[str, int]]:
    """One plan of a freshly opened table: its seconds and memwal's requests."""
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        table.store.stats.reset()
        started = time.perf_counter()
        plan = plan_gc(table, POLICY, now=now)
        seconds = time.perf_counter() - started
        assert not plan.failures, plan.failures
        return seconds, table.store.stats.snapshot()


def measure(repeat: int, run: Callable[[], tuple[float, dict[str, int]]]) -> tuple[float, dict[str, int]]:
    run()  # warm
    runs = [run() for _ in range(repeat)]
    return statistics.median(s for s, _ in runs), runs[-1][1]


def report(
    store: str, versions: int, when: str, seconds: float, requests: dict[str, int], extra: str
) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    kinds = " ".join(f"{k}={v}" for k, v in sorted(requests.items()))
    print(
        f"{store:9} +{versions:>6} {when:6} plan {seconds * 1000:6.1f} ms  memwal {kinds:28} {extra}  load {load}"
    )


def middle_aged(uri: str, options: dict[str, str], region: str) -> float:
    """A plan time at which the middle stored version is just older than the fence retention."""
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        times = table.region_store(region).stored_versions()
    return times[sorted(times)[len(times) // 2]] + POLICY.fence_retention_seconds + 1


def run(store: str, uri: str, options: dict[str, str], counts: list[int], repeat: int, proxy: Any) -> None:
    region = build(uri, options)
    added = 0
    for count in counts:
        with MemWalTable.open(uri, StorageOptions(options)) as table:
            add_manifest_versions(table, count - added)
        added = count
        for when, now in (("now", None), ("aged", middle_aged(uri, options, region))):
            if proxy is None:
                folder = str(Path(uri) / MEM_WAL_DIR / region / REGION_MANIFEST_DIR)
                with stats_under(folder) as seen:
                    seconds, requests = measure(repeat, partial(plan_once, uri, options, now))
                extra = f"manifest stats {len(seen) // (repeat + 1)}"
            else:
                through = proxy.storage_options(options)
                proxy.reset()
                seconds, requests = measure(repeat, partial(plan_once, uri, through, now))
                http = Counter({k: v // (repeat + 1) for k, v in proxy.counts.items()})
                pages = sum(1 for line in proxy.lines if "list-type=2" in line and region in line)
                extra = f"http {dict(http)} region LIST pages {pages // (repeat + 1)}"
            report(store, count, when, seconds, requests, extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, nargs="+", default=[0, 2000, 15000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the proxy holds each S3 request")
    args = parser.parse_args()
    counts = sorted(args.versions)

    with tempfile.TemporaryDirectory() as tmp:
        run("local", str(Path(tmp) / "table"), {}, counts, args.repeat, None)
    if args.skip_s3:
        return
    from tests.support.seaweed import SeaweedServer

    with SeaweedServer() as server:
        server.create_bucket("bench")
        with LatencyProxy(server.ports["s3.port"], delay=args.delay) as proxy:
            run("seaweedfs", "s3://bench/gc-versions", server.storage_options(), counts, args.repeat, proxy)


if __name__ == "__main__":
    main()
