"""Benchmark: flush-to-merge latency with the Dagster daemon at the shipped sensor settings.

A real dagster-webserver and dagster-daemon on 127.0.0.1 (the project's
dagster.yaml and workspace.yaml), the table's flushed-generations sensor
switched on, then FLUSHES flushes spread over REGIONS regions, each written
by Lance's native MemWAL writer. For each flush: the time from the writer's
close (the generation is durable) to the table version whose merge progress
covers it. Also Dagster's overhead per merge run: queued -> started, and run
start -> step start (process launch, code load). Aim: median under 30 s.

`--engine` sets the table's merge engine (default: the shipped default,
spark), and `--spark-min-rows` its threshold (0: every round on Spark). On
spark, the runs connect to a warm Spark Connect server (pyspark's own,
started here on 127.0.0.1 and stopped at the end), as in a deployment
(docs/spark.md); its start is reported apart. `--compare` measures the local
engine, the default (Spark where it pays) and Spark forced in one run, each
on a fresh table and Dagster instance, and prints their ratios to local.

Usage: python bench/lag.py [--flushes 20] [--regions 4] [--gap 2.0] [--engine local|spark]
       [--spark-min-rows N] [--compare]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from memwal_core.connect_server import ConnectServer
from memwal_core.model.table import MemWalTable
from memwal_core.spark_session import REMOTE_ENV
from memwal_pipelines.config import TableConfig
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.support.dagster import DagsterDeployment

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("v", pa.string()),
    ]
)


def flush(uri: str, region: str, keys: range, label: str) -> tuple[int, float]:
    """Write `keys` into `region` and close the writer (one flushed generation); its number and time."""
    rows = pa.table({"id": pa.array(list(keys), pa.int64()), "v": [label] * len(keys)}, schema=SCHEMA)
    with lance.dataset(uri).mem_wal_writer(region, durable_write=False) as writer:
        writer.put(rows)
    flushed_at = time.time()
    with MemWalTable.open(uri) as table:
        generation = max(g.generation for g in table.region_store(region).read_latest().generations)
    return generation, flushed_at


def merge_times(uri: str) -> dict[tuple[str, int], float]:
    """For every (region, generation) merged so far: the time of the first version recording it."""
    seen: dict[tuple[str, int], float] = {}
    with MemWalTable.open(uri) as table:
        for version in lance.dataset(uri).versions()[1:]:  # version 1 predates MemWAL
            merged = table.index_details(version["version"]).merged
            when = version["timestamp"]
            assert isinstance(when, datetime)
            stamp = when.timestamp()
            for region, generation in merged.items():
                for g in range(1, generation + 1):
                    seen.setdefault((region, g), stamp)
    return seen


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Lag:
    """One configuration's figures: flush -> merge lags, and Dagster's per-run overheads."""

    label: str
    lags: list[float]
    queued: list[float]
    launch: list[float]

    def report(self, args: argparse.Namespace) -> str:
        return (
            f"{self.label}: {len(self.lags)} flushes over {args.regions} regions, {args.gap:.1f} s apart; "
            f"flush -> merge commit median {statistics.median(self.lags):.1f} s, "
            f"p95 {percentile(self.lags, 0.95):.1f} s, max {max(self.lags):.1f} s; "
            f"{len(self.queued)} merge runs, queued -> started median {statistics.median(self.queued):.1f} s, "
            f"run start -> step start median {statistics.median(self.launch):.1f} s (load {os.getloadavg()[0]:.1f})"
        )


def measure(
    label: str, args: argparse.Namespace, tmp: Path, engine: str, min_rows: int | None, env: dict[str, str]
) -> Lag:
    """Flush into a fresh table under a fresh Dagster deployment with this merge engine; the lags."""
    uri = str(tmp / f"table-{label}")
    base = pa.table({"id": pa.array(range(10_000), pa.int64()), "v": ["base"] * 10_000}, schema=SCHEMA)
    lance.write_dataset(base, uri).initialize_mem_wal()
    regions = [str(uuid.uuid4()) for _ in range(args.regions)]
    listing = tmp / f"tables-{label}.yaml"
    threshold = "" if min_rows is None else f", spark_min_rows: {min_rows}"
    listing.write_text(f"tables:\n  - {{name: lag, uri: '{uri}', merge_engine: {engine}{threshold}}}\n")
    with DagsterDeployment(listing, env=env) as dagster:
        dagster.start_sensor(FLUSHED_SENSOR)
        flushes: list[tuple[str, int, float]] = []
        for i in range(args.flushes):
            region = regions[i % len(regions)]
            first = 100_000 * (i % len(regions)) + i * 10
            generation, at = flush(uri, region, range(first, first + 50), f"f{i}")
            flushes.append((region, generation, at))
            time.sleep(args.gap)
        deadline = time.time() + 600
        while time.time() < deadline:
            merged = merge_times(uri)
            if all((r, g) in merged for r, g, _ in flushes):
                break
            time.sleep(1.0)
        else:
            raise SystemExit(f"{label}: not every flush was merged within 10 minutes")
        from dagster import DagsterEventType, DagsterInstance
        from dagster._core.instance.ref import InstanceRef

        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster.home)))
        queued, launch = [], []
        for record in instance.get_run_records():
            run = record.dagster_run
            if not run.job_name.endswith("_merge") or record.start_time is None:
                continue
            queued.append(record.start_time - record.create_timestamp.timestamp())
            steps = instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START)
            if steps:
                launch.append(steps[0].timestamp - record.start_time)
    return Lag(label, [merged[(r, g)] - at for r, g, at in flushes], queued, launch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flushes", type=int, default=20)
    parser.add_argument("--regions", type=int, default=4)
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between flushes")
    parser.add_argument("--engine", choices=["local", "spark"], help="the table's merge engine")
    parser.add_argument(
        "--spark-min-rows",
        type=int,
        default=None,
        help="the table's spark_min_rows (0: every round on Spark)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="local, spark (default threshold) and spark forced, in one run"
    )
    args = parser.parse_args()
    default_engine = TableConfig(name="lag", uri="lag").merge_engine
    if args.compare:
        configs = [("local", "local", None), ("spark", "spark", None), ("spark forced", "spark", 0)]
    else:
        engine = args.engine or default_engine
        configs = [(engine, engine, args.spark_min_rows)]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        env = {}
        if any(engine == "spark" for _, engine, _ in configs):
            started = time.perf_counter()
            server = ConnectServer(Path(tmp) / "spark")
            server.start()
            stack.callback(server.stop)
            env[REMOTE_ENV] = server.url
            print(f"Spark Connect server {server.url} ready in {time.perf_counter() - started:.1f} s")
        results = [measure(label, args, Path(tmp), engine, rows, env) for label, engine, rows in configs]
    for result in results:
        print(result.report(args))
    local = next((r for r in results if r.label == "local"), None)
    if local is not None:
        for result in results:
            if result is not local:
                ratio = statistics.median(result.lags) / statistics.median(local.lags)
                print(f"{result.label}/local (median flush -> merge): {ratio:.2f}")


if __name__ == "__main__":
    main()
