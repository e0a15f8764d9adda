"""Benchmark: one merge on the local engine, a classic Spark session and a Spark Connect server.

Cases, each final table checked against a model of the writes:
  L:    4M base rows, 32 generations x 200k rows in one region (bench/merge.py's L)
  wide: 4M base rows (BTree on the key), 256 regions x 1 generation x 2,000 rows
        (bench/merge_regions.py's wide)
Engines, each merge from the same pre-merge version (restored between runs):
  local    threads of this process
  classic  a local[*,2] SparkSession in this process (its start printed apart)
  connect  pyspark's own Connect server on 127.0.0.1 (its start and the client's
           session printed apart)
Executors import lance and memwal before the timings (a warm-up job), as a
running service has them. Prints medians and connect/local, classic/local.

`--base-rows` and `--rows-per-generation` shrink a case for a short run.

`--crossover` instead finds the round size from which Spark is as fast as the
local engine: merge rounds of each size in `--sizes` (rows over 8 regions x 2
generations, a base of 1M rows or the round's size if larger, with a BTree on the key), on the local engine, the
warm Connect server and a standalone master with two one-core workers on
loopback (a classic session in this process as driver). Prints each
engine's median per size, its ratio to local and where the ratio crosses 1,
and draws the curve (`--svg PATH`). The load average is printed beside
each size: measure on a quiet machine.

Usage: python bench/spark.py [--case L|wide|both] [--repeats 3] [--base-rows N]
       [--rows-per-generation N] [--dir DIR]
       python bench/spark.py --crossover [--sizes 20000,100000,...] [--repeats 3] [--svg PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memwal_core  # noqa: F401, I001  # first: Lance's log at errors, less its one spurious line
import lance
import numpy as np
from bench import merge as deep
from bench import merge_regions as wide
from bench.chart import line_chart
from memwal_core.connect_server import ConnectServer
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, LocalEngine, SparkEngine
from memwal_core.services.merge.service import merge
from memwal_core.spark_session import spark_session
from tests.support.tables import restore_backlog


def warmed(engine: SparkEngine, label: str) -> SparkEngine:
    """`engine` with its session open and its executors' imports done; both times printed."""

    def load(_slot: int) -> None:  # nested, so it ships by value: executors cannot import `bench`
        import lance  # noqa: F401

        import memwal_core.services.merge.collapse  # noqa: F401

    started = time.perf_counter()
    slots = engine.parallelism()
    print(
        f"  {label}: session (and parallelism {slots}) in {time.perf_counter() - started:.1f} s (not timed)"
    )
    started = time.perf_counter()
    engine.run(load, list(range(slots)), what="executor warm-up")
    print(f"  {label}: executor warm-up in {time.perf_counter() - started:.1f} s (not timed)", flush=True)
    return engine


def built(name: str, uri: str, args: argparse.Namespace) -> Callable[[], None]:
    """Build case `name` at `uri`; returns the check of a merged table against its model."""
    if name == "L":
        _base, generations, per_generation = deep.SCALES["L"]
        per_generation = args.rows_per_generation or per_generation
        model = deep.build(uri, args.base_rows, generations, per_generation, index=True)
        return lambda: deep.check(uri, model, name)
    regions, generations, per_generation = wide.CASES["wide"]
    per_generation = args.rows_per_generation or per_generation
    regions_model = wide.build(uri, args.base_rows, regions, generations, per_generation)
    return lambda: regions_model.check(uri, name)


def run_case(name: str, args: argparse.Namespace, engines: dict[str, Engine], workdir: Path) -> None:
    uri = str(workdir / f"case-{name}")
    shutil.rmtree(uri, ignore_errors=True)
    started = time.perf_counter()
    check = built(name, uri, args)
    version = lance.dataset(uri).version
    print(
        f"case {name}: {args.base_rows:,} base rows; built in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    medians = {}
    for label, engine in engines.items():
        runs = []
        for _ in range(args.repeats):
            restore_backlog(uri, version)
            started = time.perf_counter()
            with MemWalTable.open(uri) as table:
                result = merge(table, engine=engine)
            runs.append(time.perf_counter() - started)
            assert not result.failures, result.failures
            check()
        medians[label] = sorted(runs)[len(runs) // 2]
        print(
            f"  {label:<8} {medians[label]:7.2f} s median of {', '.join(f'{r:.2f}' for r in runs)}",
            flush=True,
        )
    local = medians["local"]
    print(
        f"  connect/local {medians['connect'] / local:.2f}   classic/local {medians['classic'] / local:.2f}",
        flush=True,
    )
    shutil.rmtree(uri, ignore_errors=True)


# A crossover round: regions x generations per region, over a base this size.
CROSSOVER_SHAPE = (8, 2)
CROSSOVER_BASE_ROWS = 1_000_000
DEFAULT_SIZES = "20000,100000,300000,1000000,3000000"


def load() -> str:
    """The 1-minute load average, as printed beside each figure."""
    return f"{os.getloadavg()[0]:.1f}"


def crossing(sizes: list[int], ratios: list[float]) -> str:
    """Where a ratio to local first falls to 1, interpolated on log(size); or that it does not here."""
    points = list(zip(sizes, ratios, strict=True))
    if points[0][1] <= 1:
        return f"at or below {points[0][0]:,} rows"
    for (s0, r0), (s1, r1) in itertools.pairwise(points):
        if r1 <= 1 < r0:
            share = (r0 - 1) / (r0 - r1)
            return f"about {10 ** (np.log10(s0) + share * (np.log10(s1) - np.log10(s0))):,.0f} rows"
    return f"not up to {points[-1][0]:,} rows (ratio {points[-1][1]:.2f} there)"


def crossover(args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack) -> None:
    """Merge rounds of growing size on each engine; print the ratios, the crossing and the picture."""
    from tests.support.spark import StandaloneSpark

    started = time.perf_counter()
    server = ConnectServer(workdir / "connect")
    server.start()
    stack.callback(server.stop)
    cluster = StandaloneSpark(cores=1, workers=2, memory="2g")
    stack.callback(cluster.stop)
    # Executors import memwal (its daemon first) from this checkout, as the Connect server's workers do.
    checkout = {"spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    classic = spark_session(
        cluster.master_url, {**cluster.client_conf(), **checkout, "spark.ui.enabled": "false"}
    )
    print(f"Connect server and standalone cluster (2 workers) ready in {time.perf_counter() - started:.1f} s")
    connect = SparkEngine(remote=server.url)
    stack.callback(connect.close)
    engines: dict[str, Engine] = {
        "local": LocalEngine(),
        "connect": warmed(connect, "connect"),
        "standalone": warmed(SparkEngine(classic), "standalone"),
    }
    sizes = [int(size) for size in args.sizes.split(",")]
    regions, generations = CROSSOVER_SHAPE
    medians: dict[str, list[float]] = {label: [] for label in engines}
    for size in sizes:
        uri = str(workdir / f"round-{size}")
        # The base holds at least the round's rows: a region's updates are drawn from the keys it owns.
        base_rows = max(CROSSOVER_BASE_ROWS, size)
        model = wide.build(uri, base_rows, regions, generations, size // (regions * generations))
        version = lance.dataset(uri).version
        line = [f"{size:>9,} rows"]
        for label, engine in engines.items():

            def run(engine: Engine = engine, uri: str = uri) -> None:
                with MemWalTable.open(uri) as table:
                    result = merge(table, engine=engine)
                assert not result.failures, result.failures

            medians[label].append(wide.timed(uri, version, model, label, run, args.repeats))
            line.append(f"{label} {medians[label][-1]:6.2f} s")
        ratios = "  ".join(
            f"{label}/local {medians[label][-1] / medians['local'][-1]:.2f}"
            for label in engines
            if label != "local"
        )
        print(f"{'   '.join(line)}   {ratios}   (load {load()})", flush=True)
        shutil.rmtree(uri, ignore_errors=True)
    for label in engines:
        if label != "local":
            ratios_of = [m / local for m, local in zip(medians[label], medians["local"], strict=True)]
            print(f"{label} as fast as local: {crossing(sizes, ratios_of)}")
    if args.svg:
        line_chart(
            {label: list(zip(sizes, values, strict=True)) for label, values in medians.items()},
            args.svg,
            title=f"One merge round ({regions} regions x {generations} generations, base >= {CROSSOVER_BASE_ROWS:,} rows)",
            x_label="rows per round",
            y_label="seconds (median)",
        )
        print(f"picture: {args.svg}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossover", action="store_true", help="find the round size where Spark pays")
    parser.add_argument(
        "--sizes", default=DEFAULT_SIZES, help="rows per round, comma-separated (--crossover)"
    )
    parser.add_argument("--svg", type=Path, default=None, help="draw the crossover curve here (--crossover)")
    parser.add_argument("--case", choices=["L", "wide", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base-rows", type=int, default=4_000_000)
    parser.add_argument("--rows-per-generation", type=int, default=None, help="default: the case's own")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        if args.crossover:
            crossover(args, Path(tmp), stack)
            return
        print("engines:")
        started = time.perf_counter()
        classic = spark_session("local[*,2]", {"spark.ui.enabled": "false"})
        print(f"  classic: JVM and session start {time.perf_counter() - started:.1f} s (not timed)")
        started = time.perf_counter()
        server = ConnectServer(Path(tmp) / "connect")
        server.start()
        stack.callback(server.stop)
        print(f"  connect: server start {time.perf_counter() - started:.1f} s (not timed)")
        connect = SparkEngine(remote=server.url)
        stack.callback(connect.close)
        engines: dict[str, Engine] = {
            "local": LocalEngine(),
            "classic": warmed(SparkEngine(classic), "classic"),
            "connect": warmed(connect, "connect"),
        }
        for name in ("L", "wide") if args.case == "both" else (args.case,):
            run_case(name, args, engines, Path(tmp))


if __name__ == "__main__":
    main()
