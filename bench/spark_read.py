"""Benchmark: the `memwal` Spark source reading base + pending generations, against its own base-only read,
a plain Lance read of the base and Lance's `LsmScanner`, all in one process.

The table: a base of 4M rows (id, n, s; Lance's default 1M-row fragments, a BTree on the key), bucketed
by id into 32 regions, each with pending generations written through `MemWalWriter` (updates of base
keys, new keys and deletes). Timed, median of `--repeats`:

  lance-base   `lance.dataset(uri).to_table()`: every base row, in this process
  lsm-scanner  Lance's `LsmScanner` over memwal's plan: the MemWAL-aware rows, in this process
  source-base  `spark.read.format("memwal").option("use_lsm", "false")`: the base through Spark
  source-lsm   `spark.read.format("memwal")`: base + every pending generation through Spark
  lookup       `... .option("keys", K)` through the source: one key

The Spark reads go to Spark's `noop` sink (every row read and handed to Spark, nothing collected).
Aim: source-lsm / source-base <= 1.3. The point lookup's plan is printed: what it opens (regions,
generations, base fragments) against what the full read opens. Each figure is printed beside the
load average (`os.getloadavg()`), since the machine may be shared.

Usage: python bench/spark_read.py [--base-rows 4000000] [--regions 32] [--generations 4]
       [--rows-per-generation 5000] [--repeats 5] [--scanner-repeats 1] [--connect] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memwal_core  # noqa: F401  # first: Lance's log at errors
from memwal_core import MemWalTable, MemWalWriter, lsm_scanner, plan_read, register_spark_source
from memwal_core.connect_server import ConnectServer
from memwal_core.services.spark_read.plan import SourcePlan, slices
from memwal_core.services.spark_read.source import MemWalDataSource
from memwal_core.spark_session import connect_session, spark_session

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
        pa.field("s", pa.string()),
    ]
)
DELETE_SHARE = 20  # one key in 20 of each round is a delete
NEW_SHARE = 5  # one key in 5 of each round is new


def build(uri: str, base_rows: int, regions: int, generations: int, per_generation: int) -> None:
    """The base (BTree on id), MemWAL bucketed by id, then `generations` flushed rounds over every region."""
    import lance

    ids = np.arange(base_rows, dtype=np.int64)
    base = pa.table({"id": ids, "n": ids * 1000, "s": pa.array(["b"] * base_rows)}, schema=SCHEMA)
    dataset = lance.write_dataset(base, uri)
    dataset.create_scalar_index("id", "BTREE")
    dataset.initialize_mem_wal(bucket_column="id", num_buckets=regions)
    rng = np.random.default_rng(7)
    per_round = regions * per_generation
    fresh = base_rows
    with MemWalWriter(uri, durable_write=False, max_memtable_rows=2 * per_generation) as writer:
        for g in range(1, generations + 1):
            new = np.arange(fresh, fresh + per_round // NEW_SHARE, dtype=np.int64)
            fresh += len(new)
            updates = rng.choice(base_rows, per_round - len(new) - per_round // DELETE_SHARE, replace=False)
            put_ids = np.concatenate([updates, new])
            writer.put(
                pa.table({"id": put_ids, "n": put_ids * 1000 + g, "s": ["u"] * len(put_ids)}, schema=SCHEMA)
            )
            doomed = np.setdiff1d(
                rng.choice(base_rows, 2 * (per_round // DELETE_SHARE), replace=False), put_ids
            )
            writer.delete(doomed[: per_round // DELETE_SHARE].tolist())
            writer.flush()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def timed(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each run, `repeats` times; the runs alternate (a, b, a, b, ...) so that a load that comes
    and goes on a shared machine weighs on each alike. Prints each run's median."""
    seconds: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(repeats):
        for label, run in runs.items():
            started = time.perf_counter()
            run()
            seconds[label].append(time.perf_counter() - started)
    for label, each in seconds.items():
        listed = ", ".join(f"{s:.2f}" for s in each)
        print(f"  {label:<12} {statistics.median(each):7.2f} s   (median of {listed})", flush=True)
    print(f"  ({load()})", flush=True)
    return seconds


def opened(plan: SourcePlan) -> str:
    """What a plan opens: regions, generations, base fragments, and the Spark partitions it is cut into."""
    generations = sum(len(r.generations) for r in plan.regions)
    return (
        f"{len(plan.regions)} region(s), {generations} generation(s), {len(plan.fragments)} base fragment(s) "
        f"in {len(slices(plan))} partition(s)"
    )


def run(session: Any, label: str, uri: str, repeats: int, lookup_key: int) -> dict[str, list[float]]:
    """The source's timings in `session`: base only, base + pending generations, one key."""
    register_spark_source(session)
    base_only = session.read.format("memwal").option("use_lsm", "false").load(uri)
    lsm = session.read.format("memwal").load(uri)  # a reader of its own: `option` changes the reader
    lookup = session.read.format("memwal").option("keys", str(lookup_key)).load(uri)
    print(f"{label}:")
    timed({"warm-up": lambda: lsm.write.format("noop").mode("overwrite").save()}, 1)
    return timed(
        {
            "source-base": lambda: base_only.write.format("noop").mode("overwrite").save(),
            "source-lsm": lambda: lsm.write.format("noop").mode("overwrite").save(),
            "lookup": lambda: lookup.collect(),
        },
        repeats,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-rows", type=int, default=4_000_000)
    parser.add_argument("--regions", type=int, default=32)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--rows-per-generation", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scanner-repeats", type=int, default=1, help="LsmScanner is slow (minutes): once")
    parser.add_argument("--connect", action="store_true", help="also read through a Spark Connect server")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    import lance

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        uri = str(Path(tmp) / "events")
        started = time.perf_counter()
        build(uri, args.base_rows, args.regions, args.generations, args.rows_per_generation)
        with MemWalTable.open(uri) as table:
            plan = plan_read(table)
            pending = sum(r.pending_rows or 0 for r in plan.regions)
            print(
                f"table: {args.base_rows:,} base rows, {len(plan.regions)} regions, "
                f"{sum(len(r.generations) for r in plan.regions)} pending generations ({pending:,} rows); "
                f"built in {time.perf_counter() - started:.1f} s",
                flush=True,
            )
            print("in this process:")
            lance_seconds = statistics.median(
                timed({"lance-base": lambda: lance.dataset(uri).to_table()}, args.repeats)["lance-base"]
            )
            rows: list[int] = []
            scanner_seconds = statistics.median(
                timed(
                    {
                        "lsm-scanner": lambda: rows.append(
                            lsm_scanner(table, plan_read(table)).to_table().num_rows
                        )
                    },
                    args.scanner_repeats,
                )["lsm-scanner"]
            )

        lookup_key = args.base_rows // 2 + 1
        full = MemWalDataSource({"path": uri}).plan
        key = MemWalDataSource({"path": uri, "keys": str(lookup_key)}).plan
        print(f"plans (what each read opens): full read {opened(full)}")
        print(f"                              keys={lookup_key}: {opened(key)}")

        started = time.perf_counter()
        sessions = {"classic": spark_session("local[*,2]", {"spark.ui.enabled": "false"})}
        print(f"classic session start {time.perf_counter() - started:.1f} s (not timed)")
        if args.connect:
            server = ConnectServer(Path(tmp) / "connect")
            server.start()
            stack.callback(server.stop)
            sessions["connect"] = connect_session(server.url)
            stack.callback(sessions["connect"].stop)
        for label, session in sessions.items():
            figures = run(session, f"{label} session", uri, args.repeats, lookup_key)
            count = session.read.format("memwal").load(uri).count()
            assert count == rows[-1], f"the source read {count} rows, LsmScanner {rows[-1]}"
            base, lsm, lookup = (
                statistics.median(figures[k]) for k in ("source-base", "source-lsm", "lookup")
            )
            paired = statistics.median(
                b / a for a, b in zip(figures["source-base"], figures["source-lsm"], strict=True)
            )
            print(
                f"  rows: source {count:,} = LsmScanner {rows[-1]:,}\n"
                f"  source-lsm / source-base {lsm / base:.2f} (aim <= 1.3; run by run, median {paired:.2f})   "
                f"source-lsm / lance-base {lsm / lance_seconds:.1f}   "
                f"source-lsm / lsm-scanner {lsm / scanner_seconds:.4f}   "
                f"lookup / source-lsm {lookup / lsm:.2f}   {load()}\n",
                flush=True,
            )


if __name__ == "__main__":
    main()
