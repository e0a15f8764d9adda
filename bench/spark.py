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

Usage: python bench/spark.py [--case L|wide|both] [--repeats 3] [--base-rows N]
       [--rows-per-generation N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memwal_core  # noqa: F401  # first: Lance's log at errors, less its one spurious line
from bench import merge as deep
from bench import merge_regions as wide
from memwal_core.connect_server import ConnectServer
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, LocalEngine, SparkEngine
from memwal_core.services.merge.service import merge
from memwal_core.spark_session import spark_session


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
            restored: Any = lance.dataset(uri, version=version)
            restored.restore()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["L", "wide", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base-rows", type=int, default=4_000_000)
    parser.add_argument("--rows-per-generation", type=int, default=None, help="default: the case's own")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
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
