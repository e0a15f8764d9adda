"""Benchmark: 50 tables of 16 regions in one code location, on local disk.

Measures, each beside the baseline issue 36 names and the machine's load average:

- definitions load: `dg check defs` of a project whose defs folder holds N table
  components, against one table's (aim: at most 3x);
- the sensor tick: the location's flushed-generations sensor with a warm cursor
  (nothing changed: one HEAD per region) over one table and over all, in process;
- the daemon's CPU at idle: a real dagster-daemon (and the webserver), nothing
  written, CPU of the daemon's process tree over `--idle-seconds` with no sensor
  on (Dagster's own floor), then with the location's three sensors on (aim: under
  10% of one core); once with the project's workspace.yaml (the daemon starts its
  own code server, afresh every minute) and once as docs/deploy/ runs it (one
  long-lived code server, whose CPU is counted with the daemon's);
- flush -> merge lag: one table's 16 regions flushing at once while the others
  idle, then all N tables at once; per table the p95 of its 16 lags, and the
  merge runs each table needed (aim: every table's p95 within 3x the lone one's).

Tables are bucketed by key into `--regions` regions and written by
`MemWalWriter` (one put over every region, then a flush), built once under
`--cache` and copied for each run.

Usage: python bench/many_tables.py [--tables 50] [--regions 16] [--idle-seconds 60] [--skip-burst]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import lance
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

from memwal_core.model.table import MemWalTable  # noqa: E402
from memwal_core.services.initialize import RegionSpecChoice, initialize  # noqa: E402
from memwal_core.services.merge.service import merge  # noqa: E402
from memwal_core.services.writer import MemWalWriter  # noqa: E402

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from tests.support.dagster import DagsterDeployment

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.string())])
BASE_ROWS = 1000
DG = Path(sys.executable).parent / "dg"
PROJECT = """\
[project]
name = "many"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "many"

[tool.dg.cli]
use_component_modules = ["memwal_pipelines"]
"""
DEFINITIONS = """\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def report(label: str, value: str, ratio: str = "") -> None:
    print(f"{label:<58} {value:<28} {ratio:<28} ({load()})", flush=True)


def write_round(uri: str, regions: int, label: str, options: Mapping[str, str] | None = None) -> float:
    """One put touching every region, then a flush: one new generation per region; the flush's time."""
    keys = list(range(10_000, 10_000 + regions * 8))
    with MemWalWriter(uri, options, durable_write=False) as writer:
        writer.put(pa.table({"id": keys, "v": [label] * len(keys)}, schema=SCHEMA))
        writer.flush()
        flushed = time.time()
    return flushed


def build_table(uri: str, regions: int, base_rows: int = BASE_ROWS) -> None:
    lance.write_dataset(pa.table({"id": range(base_rows), "v": ["base"] * base_rows}, schema=SCHEMA), uri)
    with MemWalTable(uri) as table:
        initialize(table, ["id"], RegionSpecChoice(bucket_column="id", num_buckets=regions))
    write_round(uri, regions, "setup")
    with MemWalTable.open(uri) as table:
        merged = merge(table)
    assert not merged.failures and len({r.region for r in merged.regions}) == regions, merged.failures


def cached_tables(cache: Path, count: int, regions: int) -> Path:
    built = cache / f"{count}x{regions}"
    if not (built / "done").exists():
        started = time.perf_counter()
        shutil.rmtree(built, ignore_errors=True)
        built.mkdir(parents=True)
        for i in range(count):
            build_table(str(built / f"t{i}"), regions)
        (built / "done").write_text("")
        print(
            f"built {count} tables of {regions} regions in {time.perf_counter() - started:.0f} s", flush=True
        )
    return built


def dg_check_defs(root: Path, tables: list[Path], repeats: int) -> float:
    """Median seconds of `dg check defs` in a project with one component per table."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "many" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PROJECT)
    (root / "many" / "__init__.py").write_text("")
    (root / "many" / "defs" / "__init__.py").write_text("")
    (root / "many" / "definitions.py").write_text(DEFINITIONS)
    for i, table in enumerate(tables):
        folder = root / "many" / "defs" / f"t{i}"
        folder.mkdir()
        (folder / "defs.yaml").write_text(
            f"type: memwal_pipelines.MemWalTableComponent\nattributes:\n  name: t{i}\n  uri: '{table}'\n"
            "  merge_engine: local\n"
        )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MEMWAL_TABLES")}
    env["DAGSTER_HOME"] = str(root)
    (root / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run([str(DG), "check", "defs"], cwd=root, env=env, capture_output=True, text=True)
        seconds.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"dg check defs failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return statistics.median(seconds)


def sensor_ticks(tables: list[Path]) -> tuple[float, float]:
    """Seconds of one warm tick of the location's flushed-generations sensor over one table, and over all."""
    from dagster import DagsterInstance, build_sensor_context

    from memwal_pipelines.build import build_definitions
    from memwal_pipelines.config import TableConfig
    from memwal_pipelines.sensors import FLUSHED_SENSOR

    configs = [TableConfig(name=f"t{i}", uri=str(t), merge_engine="local") for i, t in enumerate(tables)]

    def warm_tick(covered: list[TableConfig]) -> float:
        definitions = build_definitions(covered)
        sensor = definitions.resolve_sensor_def(FLUSHED_SENSOR)
        cursor = None
        seconds = []
        with DagsterInstance.ephemeral() as instance:
            for _ in range(4):  # the first reads every manifest once
                with build_sensor_context(instance=instance, cursor=cursor) as context:
                    started = time.perf_counter()
                    result = sensor(context)
                    seconds.append(time.perf_counter() - started)
                cursor = result.cursor  # type: ignore[union-attr]
        return statistics.median(seconds[1:])

    return warm_tick(configs[:1]), warm_tick(configs)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and every process below it, with the children each has
    reaped (the daemon's code server, replaced every minute, would otherwise leave uncounted)."""
    from tests.support.service import descendants

    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for member in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / ticks
    return total


def merged_at(uri: str, options: Mapping[str, str] | None = None) -> dict[tuple[str, int], float]:
    """For every (region, generation) merged so far: the time of the first table version recording it."""
    seen: dict[tuple[str, int], float] = {}
    with MemWalTable.open(uri, options) as table:
        for version in table.dataset().versions()[1:]:
            when = version["timestamp"]
            assert isinstance(when, datetime)
            try:
                progress = table.index_details(version["version"]).merged
            except Exception:
                continue
            for region, generation in progress.items():
                for g in range(1, generation + 1):
                    seen.setdefault((region, g), when.timestamp())
    return seen


def flushed(uri: str, options: Mapping[str, str] | None = None) -> dict[str, int]:
    with MemWalTable.open(uri, options) as table:
        return {
            region: max(manifest.generation_numbers)
            for region, manifest in table.read_regions().items()
            if manifest is not None and manifest.generations
        }


def burst(
    tables: Sequence[Path | str],
    regions: int,
    wait: Callable[[list[str]], None],
    options: Mapping[str, str] | None = None,
    writers: int | None = None,
    flushed_at: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    """Flush one generation into every region of `tables` at once (at most `writers` tables written at
    a time: each writer opens one of Lance's native writers per region); each table's lags once merged,
    from its own flush (the time its writer ended, also put in `flushed_at` by table)."""
    with ThreadPoolExecutor(writers or len(tables)) as pool:
        ends = pool.map(lambda t: write_round(str(t), regions, "burst", options), tables)
        flushes = dict(zip(map(str, tables), ends, strict=True))
    if flushed_at is not None:
        flushed_at.update(flushes)
    targets = {str(t): flushed(str(t), options) for t in tables}
    wait([str(t) for t in tables])
    lags: dict[str, list[float]] = {}
    for uri, latest in targets.items():
        done = merged_at(uri, options)
        lags[uri] = [done[(region, g)] - flushes[uri] for region, g in latest.items()]
    return lags


def wait_merged(
    instance: DagsterInstance,
    tables: list[str],
    options: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> None:
    """Until no run is queued or running and no table of `tables` has a pending generation."""
    from dagster import DagsterRunStatus, RunsFilter

    from memwal_core.services.status import status

    busy = [
        DagsterRunStatus.QUEUED,
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
    ]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(2)
        if instance.get_runs_count(RunsFilter(statuses=busy)):
            continue
        with_pending = 0
        for t in tables:
            with MemWalTable.open(t, options) as table:
                with_pending += status(table).pending_total
        if not with_pending:
            return
    raise SystemExit(f"not merged within {timeout:.0f} s")


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--regions", type=int, default=16)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3, help="dg check defs runs per project")
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "memwal-many-tables-cache"
    )
    args = parser.parse_args()
    built = cached_tables(args.cache, args.tables, args.regions)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tables = []
        for i in range(args.tables):
            shutil.copytree(built / f"t{i}", work / f"t{i}")
            tables.append(work / f"t{i}")
        print(
            f"{args.tables} tables x {args.regions} regions on local disk, {os.cpu_count()} cores\n",
            flush=True,
        )

        alone = dg_check_defs(work / "project-1", tables[:1], args.repeats)
        many = dg_check_defs(work / f"project-{args.tables}", tables, args.repeats)
        report("dg check defs, 1 table", f"{alone:.1f} s")
        report(
            f"dg check defs, {args.tables} tables",
            f"{many:.1f} s",
            f"{many / alone:.2f}x one table (aim <= 3x)",
        )

        one, every = sensor_ticks(tables)
        report("sensor tick over one table (warm cursor)", f"{one * 1000:.0f} ms")
        report(
            f"sensor tick over all {args.tables} tables (warm)",
            f"{every:.2f} s",
            f"{every / args.tables * 1000:.1f} ms per table, {every / one:.1f}x one table's tick",
        )
        idle_and_bursts(work, tables, args, one)


@contextlib.contextmanager
def idle(listing: Path, args: argparse.Namespace, *, code_server: bool) -> Iterator[DagsterDeployment]:
    """The daemon's tree CPU at idle (with the code server's, when it runs apart), no sensor on, then
    all three on; yields the running deployment for the bursts (in the docs/deploy/ topology only).

    The first topology is the project's workspace.yaml, which `dg dev` uses: the daemon starts its
    own code server, and starts a fresh one each minute. The second is docs/deploy/: one long-lived
    code server (memwal-code-server.service's command) serving the daemon and the webserver.
    """
    from memwal_pipelines.sensors import CATCHUP_SENSOR, COMPACTION_SENSOR, FLUSHED_SENSOR
    from tests.support.dagster import DagsterDeployment

    topology = "docs/deploy (code server apart)" if code_server else "workspace.yaml (daemon's code server)"
    started = time.perf_counter()
    with DagsterDeployment(listing, start_timeout=600, code_server=code_server) as running:
        print(f"{topology}: webserver + daemon ready in {time.perf_counter() - started:.0f} s", flush=True)
        roots = [running.pids["daemon"], *([running.pids["code_server"]] if code_server else [])]

        def idle_share() -> float:
            cpu, wall = sum(map(tree_cpu, roots)), time.monotonic()
            time.sleep(args.idle_seconds)
            return (sum(map(tree_cpu, roots)) - cpu) / (time.monotonic() - wall)

        time.sleep(10)
        base = idle_share()
        report(
            f"{topology}: CPU at idle, no sensor on", f"{base * 100:.1f}% of one core", "Dagster's own floor"
        )
        for sensor in (FLUSHED_SENSOR, CATCHUP_SENSOR, COMPACTION_SENSOR):
            running.start_sensor(sensor)
        time.sleep(30)  # every sensor ticked once: cursors filled, tables open
        share = idle_share()
        report(
            f"{topology}: CPU at idle, every sensor on",
            f"{share * 100:.1f}% of one core",
            ("aim < 10%; " if code_server else "dg dev's layout, no aim; ")
            + f"{(share - base) * 100:.1f} points over the floor",
        )
        yield running


def idle_and_bursts(work: Path, tables: list[Path], args: argparse.Namespace, one_tick: float) -> None:
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    from memwal_pipelines.merge_tables import MERGE_TABLES_JOB, TABLES_TAG

    listing = work / "tables.yaml"
    listing.write_text(
        "tables:\n"
        + "".join(f"  - {{name: t{i}, uri: '{t}', merge_engine: local}}\n" for i, t in enumerate(tables))
    )
    with idle(listing, args, code_server=False):
        pass
    with idle(listing, args, code_server=True) as running:
        if args.skip_burst:
            return
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home)))

        def wait(bursting: list[str]) -> None:
            wait_merged(instance, bursting)

        def runs_per_table(since: float) -> list[int]:
            """Merge runs each table took part in since `since`: its own, and shared ones naming it."""
            finished = RunsFilter(statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE])
            counts = {f"t{i}": 0 for i in range(len(tables))}
            for record in instance.get_run_records(finished):
                run = record.dagster_run
                if record.create_timestamp.timestamp() < since:
                    continue
                named = run.tags.get(TABLES_TAG, "").split(",") if run.job_name == MERGE_TABLES_JOB else []
                for name in [*named, run.job_name.removesuffix("_merge")]:
                    if name in counts:
                        counts[name] += 1
            return list(counts.values())

        since = time.time()
        lone = burst(tables[:1], args.regions, wait)[str(tables[0])]
        lone_p95 = p95(lone)
        report(
            f"flush -> merge, 1 table bursting ({args.regions} flushes)",
            f"p95 {lone_p95:.1f} s, max {max(lone):.1f} s",
        )
        lone_runs = runs_per_table(since)[0]
        since = time.time()
        every = burst(tables, args.regions, wait)
        worst = max(every.values(), key=p95)
        p95s = sorted(p95(v) for v in every.values())
        runs = runs_per_table(since)
        report(
            f"flush -> merge, {len(tables)} tables bursting at once",
            f"p95 per table: median {statistics.median(p95s):.1f} s, worst {p95(worst):.1f} s",
            f"worst {p95(worst) / lone_p95:.2f}x the lone table's (aim <= 3x)",
        )
        report(
            "merge runs per table during the burst",
            f"lone: {lone_runs}; all: max {max(runs)}, median {statistics.median(runs):.0f}",
            "aim: no table waits more than two rounds",
        )
        print(f"(one warm sensor tick took {one_tick * 1000:.0f} ms in process)")


if __name__ == "__main__":
    main()
