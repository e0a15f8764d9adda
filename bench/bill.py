"""Benchmark: what keeping tables costs, in requests and stored bytes, per table and per hour.

The deployed layout of docs/deploy/ runs for real: one long-lived code server,
the daemon and the webserver, with every memwal sensor and schedule on, and
`memwal metrics --listen` scraped every `--scrape-seconds` (15 s, the
shipped unit's read interval). `--tables` tables of `--regions` regions live
on SeaweedFS behind a proxy that holds each request `--delay-ms` (20) and
counts it by kind (HEAD, GET, PUT, LIST, DELETE) and by who made it. The
first `--writing` tables have a steady durable writer (`--put-rate` puts a
second of `--put-rows` rows, a flush every `--flush-seconds`); the others
are idle. After `--warmup-seconds` the counters start, and run for `--minutes`.

Who made a request is read from its User-Agent: memwal names the service in it
(`memwal/merge`, `memwal/sensor`, `memwal/metrics`, `memwal/writer`, ...) on its
own requests and on Lance's (StorageOptions.for_service), as an operator sees it
in S3's access logs.

Schedules run compressed by the factors in SCHEDULES (the snapshot every minute
instead of every 15, GC every 4 minutes instead of hourly, ...); their requests
are divided by their factor, so every figure is per real hour at the default
schedules (`--real-schedules` keeps the defaults: with 50 tables, a snapshot run a minute per
table would be the machine's whole load). GC's grace period is compressed with GC's schedule, so an
idle table is idle past it, as one idle for hours is. An idle table's watching backs off for half an
hour (the exporter's bound, half the 900 s lag threshold, is reached after 30 idle minutes): a
`--warmup-seconds` of 1800 measures the steady state. Sensors, merges, catch-up, the exporter and writers run
at their real rates.

`--burst` then measures the scale figures: the deployment's CPU by component and requests a second
over the counted window, the flushed-generations sensor's tick times, and flush -> merged lags of
one table bursting alone, then of every table at once (the moonshot: `--tables 50 --regions 200
--writing 0 --real-schedules --burst`).

At the end the bucket is listed directly (not through the proxy) and each
table's objects are sorted by kind: base table, pending generations, merged
generations, WAL entries, region manifests, memwal's own records. The month's
cost uses S3's list prices (PRICES, or `--price KIND=USD_PER_1000`).

Usage: python bench/bill.py [--tables 4] [--regions 16] [--writing 1] [--minutes 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

from bench.many_tables import SCHEMA, build_table, burst, load, p95, tree_cpu, wait_merged  # noqa: E402
from bench.width_s3 import upload  # noqa: E402
from memwal_core.storage.object_store import REQUEST_KINDS  # noqa: E402
from tests.support.cli import option_flags  # noqa: E402
from tests.support.proxy import LatencyProxy  # noqa: E402

# S3 Standard list prices (us-east-1): USD per 1,000 requests, and per GB-month stored.
PRICES = {"HEAD": 0.0004, "GET": 0.0004, "PUT": 0.005, "LIST": 0.005, "DELETE": 0.0, "GB_MONTH": 0.023}
HOURS_PER_MONTH = 730
# A scheduled job -> the table key of its cron, the compressed cron, and its factor: runs per hour at the
# default cron / at the compressed one.
SCHEDULES = {
    "snapshot": ("snapshot_cron", "* * * * *", 15.0),  # default every 15 minutes
    "gc": ("gc_cron", "*/4 * * * *", 15.0),  # default hourly
    "compaction": ("compaction_cron", "*/24 * * * *", 15.0),  # default every 6 hours
    "retention": ("retention_cron", "0 */2 * * *", 12.0),  # default daily
    "checks": ("checks_cron", "*/4 * * * *", 15.0),  # default hourly
}
# The default grace period of merged generations (compressed with GC's schedule).
GC_GRACE_SECONDS = 3600.0
# The scheduled services (as their User-Agent names them) and their jobs. The snapshot job also records
# the status asset; the checks GC's job runs (its blocking consistency check, its backlog check) are GC's.
SERVICE_JOB = {
    "snapshot": "snapshot",
    "status": "snapshot",
    "gc": "gc",
    "compact": "compaction",
    "retain": "retention",
    "checks": "checks",
}
# Services in the order printed; "writer" is the tables' own writers, not memwal's maintenance.
SERVICES = ("sensor", "metrics", "merge", "catchup", *SERVICE_JOB, "writer", "other")
BUCKET = "bill"


def request_kind(line: str) -> str:
    """HEAD, GET, PUT, LIST or DELETE for an S3 request line (a POST is a batch delete or an upload)."""
    method, _, rest = line.partition(" ")
    target = rest.split(" ", 1)[0]
    if method == "GET" and ("list-type=" in target or "delimiter=" in target or "?prefix=" in target):
        return "LIST"
    if method == "POST":
        return "DELETE" if "?delete" in target else "PUT"
    return method if method in REQUEST_KINDS else "GET"


def request_table(line: str) -> str | None:
    """The table (first key segment under the bucket) a request names, by key or by listing prefix."""
    target = line.split(" ", 2)[1]
    path, _, query = target.partition("?")
    parts = path.lstrip("/").split("/")
    if len(parts) > 1 and parts[1]:
        return parts[1]
    found = re.search(r"prefix=([^&/%]+)", query)
    return found.group(1) if found else None


def request_service(head: bytes) -> str:
    """The memwal service a request's User-Agent names (`memwal/merge`, Lance appending its own), else "other"."""
    found = re.search(rb"(?im)^user-agent:\s*memwal/(\w+)", head)
    return found.group(1).decode() if found else "other"


class BillingProxy(LatencyProxy):
    """The latency proxy, counting each request by (table, service, kind) while `counting`."""

    def __init__(self, upstream_port: int, *, delay: float) -> None:
        self.bill: Counter[tuple[str, str, str]] = Counter()
        # Bytes the writers PUT, by table, counting or not: what the tables ingested (WAL entries, generations).
        self.ingested: Counter[str] = Counter()
        self.counting = False
        super().__init__(upstream_port, delay=delay)

    def on_request_head(self, line: str, head: bytes) -> object:
        key = (request_table(line) or "?", request_service(head), request_kind(line))
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        with self._lock:
            if self.counting:
                self.bill[key] += 1
            if key[1] == "writer" and key[2] == "PUT" and length:
                self.ingested[key[0]] += int(length.group(1))
        return self.on_request(line)


def writer_main(args: argparse.Namespace) -> None:
    """A steady durable writer: `put_rate` puts a second of `put_rows` rows, flushing every `flush_seconds`."""
    from memwal_core.services.writer import MemWalWriter
    from memwal_core.storage.options import StorageOptions

    options = StorageOptions(json.loads(os.environ["BILL_STORAGE_OPTIONS"]))
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + args.seconds
    with MemWalWriter(args.writer, options) as writer:
        next_put = next_flush = time.monotonic()
        while time.monotonic() < deadline:
            keys = rng.integers(0, 100_000, args.put_rows)
            writer.put(pa.table({"id": keys, "v": ["w"] * len(keys)}, schema=SCHEMA))
            now = time.monotonic()
            if now >= next_flush + args.flush_seconds:
                writer.flush()
                next_flush = now
            next_put += 1 / args.put_rate
            time.sleep(max(0.0, next_put - time.monotonic()))


def stored_by_kind(store: Any, table: str, pending: dict[str, set[int]]) -> dict[str, tuple[int, int]]:
    """Objects and bytes of one table by kind; `pending`: each region's unmerged generations."""
    kinds: dict[str, list[int]] = {}
    pattern = re.compile(r"^_mem_wal/([^/]+)/([^/]+)/")
    for info in store.list_files(table, recursive=True):
        rel = info.path[len(table) + 1 :]
        found = pattern.match(rel)
        if rel.startswith("_memwal_"):
            kind = "memwal records"
        elif not found:
            kind = "base table"
        elif found.group(2) == "wal":
            kind = "WAL entries"
        elif found.group(2) == "manifest":
            kind = "region manifests"
        elif "_gen_" in found.group(2):
            generation = int(found.group(2).rpartition("_gen_")[2])
            kind = (
                "pending generations"
                if generation in pending.get(found.group(1), set())
                else "merged generations"
            )
        else:
            kind = "other"
        entry = kinds.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += info.size
    return {k: (v[0], v[1]) for k, v in kinds.items()}


def pending_generations(uri: str, options: dict[str, str]) -> dict[str, set[int]]:
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.status import status
    from memwal_core.storage.options import StorageOptions

    with MemWalTable.open(uri, StorageOptions(options)) as table:
        return {r.region: set(r.pending_generations) for r in status(table).regions}


def scrape(url: str, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=60).read()


def money(requests: Counter[str], hours: float) -> float:
    """USD a month for `requests` (by kind) made over `hours`."""
    return sum(PRICES[k] / 1000 * n for k, n in requests.items()) / hours * HOURS_PER_MONTH


@contextlib.contextmanager
def processes(
    commands: list[tuple[list[str], dict[str, str]]], logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    started = []
    try:
        for i, (command, env) in enumerate(commands):
            log = open(logs / f"process-{i}.log", "wb")  # noqa: SIM115 - the process owns it
            started.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield started
    finally:
        for p in started:
            p.terminate()
        for p in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
            if p.poll() is None:
                p.kill()


def build(args: argparse.Namespace, server: Any) -> list[str]:
    """Upload `--tables` tables (built once on local disk under `--cache`) to the bucket; their URIs."""
    cached = args.cache / f"{args.regions}-regions-{args.base_rows}-rows"
    if not (cached / "_versions").is_dir():
        shutil.rmtree(cached, ignore_errors=True)
        cached.parent.mkdir(parents=True, exist_ok=True)
        build_table(str(cached), args.regions, args.base_rows)
    uris = [f"s3://{BUCKET}/t{i}" for i in range(args.tables)]
    for uri in uris:
        upload(cached, uri, server.storage_options())
    return uris


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--regions", type=int, default=16)
    parser.add_argument("--base-rows", type=int, default=1_000_000)
    parser.add_argument("--writing", type=int, default=1, help="tables with a steady writer (the first ones)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=90.0)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--scrape-seconds", type=float, default=15.0)
    parser.add_argument("--put-rate", type=float, default=8.0)
    parser.add_argument("--put-rows", type=int, default=8)
    parser.add_argument("--flush-seconds", type=float, default=60.0)
    parser.add_argument(
        "--burst",
        action="store_true",
        help="then flush every region of one table, then of all, and time merges",
    )
    parser.add_argument(
        "--real-schedules", action="store_true", help="the default schedules, not compressed (many tables)"
    )
    parser.add_argument(
        "--burst-writers", type=int, default=4, help="tables the burst writes at a time (one process)"
    )
    parser.add_argument("--price", action="append", default=[], metavar="KIND=USD", help="per 1,000 requests")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memwal-bill-cache")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer_main(args)
        return
    for item in args.price:
        kind, _, usd = item.partition("=")
        PRICES[kind.upper()] = float(usd)
    run(args)


def run(args: argparse.Namespace) -> None:
    from memwal_core.storage.options import StorageOptions
    from memwal_core.storage.stores import open_store
    from memwal_pipelines.sensors import CATCHUP_SENSOR, COMPACTION_SENSOR, FLUSHED_SENSOR
    from tests.support.dagster import DagsterDeployment
    from tests.support.seaweed import SeaweedServer
    from tests.support.service import free_ports

    with SeaweedServer() as server, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server.create_bucket(BUCKET)
        uris = build(args, server)
        listing = work / "tables.yaml"
        crons = "".join(
            f", {key}: '{cron}'" for key, cron, _f in SCHEDULES.values() if key and not args.real_schedules
        )
        if not args.real_schedules:
            # GC's grace period runs on GC's clock: a table idle for an hour has none left in its grace.
            crons += f", gc_grace_seconds: {GC_GRACE_SECONDS / SCHEDULES['gc'][2]:g}"
        listing.write_text(
            "tables:\n"
            + "".join(
                f"  - {{name: t{i}, uri: '{u}', merge_engine: local, storage_options_env: BILL_STORAGE_OPTIONS{crons}}}\n"
                for i, u in enumerate(uris)
            )
        )
        with BillingProxy(server.ports["s3.port"], delay=args.delay_ms / 1000) as proxy:
            options = proxy.storage_options(server.storage_options())
            os.environ["BILL_STORAGE_OPTIONS"] = json.dumps(options)
            env = {"BILL_STORAGE_OPTIONS": json.dumps(options)}
            with DagsterDeployment(listing, env=env, start_timeout=600, code_server=True) as running:
                for sensor in (FLUSHED_SENSOR, CATCHUP_SENSOR, COMPACTION_SENSOR):
                    running.start_sensor(sensor)
                for i in range(len(uris)):
                    for job in SCHEDULES:
                        running.start_schedule(f"t{i}_{job}_schedule")
                (port,) = free_ports(1)
                seconds = args.warmup_seconds + args.minutes * 60
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                commands = [
                    (
                        [
                            str(Path(sys.executable).parent / "memwal"),
                            "metrics",
                            *uris,
                            *option_flags(options),
                            "--listen",
                            f"127.0.0.1:{port}",
                        ],
                        env,
                    ),
                    *(
                        (
                            [
                                sys.executable,
                                __file__,
                                "--writer",
                                u,
                                "--seconds",
                                str(seconds + 60),
                                "--put-rate",
                                str(args.put_rate),
                                "--put-rows",
                                str(args.put_rows),
                                "--flush-seconds",
                                str(args.flush_seconds),
                            ],
                            env,
                        )
                        for u in uris[: args.writing]
                    ),
                ]
                with processes(commands, work) as started:
                    stop = threading.Event()
                    scraper = threading.Thread(
                        target=scrape,
                        args=(f"http://127.0.0.1:{port}/metrics", stop, args.scrape_seconds),
                        daemon=True,
                    )
                    scraper.start()
                    time.sleep(args.warmup_seconds)
                    cpu = cpu_by_component(running.pids, server.pid, started[0].pid)
                    proxy.counting = True
                    began, began_at = time.monotonic(), time.time()
                    time.sleep(args.minutes * 60)
                    proxy.counting = False
                    seconds = time.monotonic() - began
                    runs = runs_by_job(running, began_at, time.time())
                    hours = seconds / 3600
                    after = cpu_by_component(running.pids, server.pid, started[0].pid)
                    idle = Idle(
                        {k: (after[k] - cpu[k]) / seconds for k in cpu},
                        sum(proxy.bill.values()) / seconds,
                        sensor_ticks(running),
                    )
                    report_idle(idle)
                    if args.burst:
                        report_bursts(args, burst_lags(running, uris, args, options))
                    stop.set()
        direct = server.storage_options()
        store = open_store(f"s3://{BUCKET}", StorageOptions(direct))
        stored = {
            f"t{i}": stored_by_kind(store, f"t{i}", pending_generations(u, direct))
            for i, u in enumerate(uris)
        }
    report(args, proxy, hours, stored, runs)


def runs_by_job(running: Any, since: float, until: float) -> Counter[str]:
    """How many runs of each job the deployment created between `since` and `until` (epoch seconds)."""
    from dagster import DagsterInstance, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home))) as instance:
        records = instance.get_run_records(RunsFilter())
    return Counter(
        r.dagster_run.job_name for r in records if since <= r.create_timestamp.timestamp() <= until
    )


@dataclass(frozen=True)
class Idle:
    """The deployment over the counted window: CPU share of one core by component, requests a second,
    and the flushed-generations sensor's tick durations (seconds)."""

    cpu: dict[str, float]
    requests_per_second: float
    ticks: list[float]


def cpu_by_component(pids: dict[str, int], seaweed: int | None, exporter: int) -> dict[str, float]:
    """CPU seconds so far of each part of the deployment (a process with all below it)."""
    return {
        "code server (sensors) and its runs": tree_cpu(pids["code_server"]),
        "daemon": tree_cpu(pids["daemon"]),
        "webserver": tree_cpu(pids["webserver"]),
        "exporter": tree_cpu(exporter),
        "SeaweedFS": tree_cpu(seaweed) if seaweed else 0.0,
        "this process (the proxy)": time.process_time(),
    }


def sensor_ticks(running: Any) -> list[float]:
    """Durations of the flushed-generations sensor's recent ticks, from Dagster's tick records."""
    from memwal_pipelines.sensors import FLUSHED_SENSOR
    from tests.support.dagster import LOCATION, REPOSITORY

    data = running.graphql(
        """query($selector: SensorSelector!) {
             sensorOrError(sensorSelector: $selector) {
               ... on Sensor { sensorState { ticks(limit: 200) { timestamp endTimestamp } } }
             }
           }""",
        {
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": REPOSITORY,
                "sensorName": FLUSHED_SENSOR,
            }
        },
    )
    ticks = data["sensorOrError"]["sensorState"]["ticks"]
    return [t["endTimestamp"] - t["timestamp"] for t in ticks if t.get("endTimestamp")]


def burst_lags(
    running: Any, uris: list[str], args: argparse.Namespace, options: dict[str, str]
) -> tuple[list[float], dict[str, list[float]]]:
    """Flush one generation into every region of the last table alone, then of every table
    (`--burst-writers` tables written at a time); the flush -> merged lags of each."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    with DagsterInstance.from_ref(InstanceRef.from_dir(str(running.home))) as instance:

        def wait(tables: list[str]) -> None:
            wait_merged(instance, tables, options)

        lone = burst(uris[-1:], args.regions, wait, options)[uris[-1]]
        print(f"lone table burst merged: p95 {p95(lone):.1f} s ({load()})", flush=True)
        flushed_at: dict[str, float] = {}
        began = time.time()
        every = burst(uris, args.regions, wait, options, args.burst_writers, flushed_at)
        report_burst_runs(instance, {u: f"t{i}" for i, u in enumerate(uris)}, flushed_at, began)
    return lone, every


def report_burst_runs(
    instance: Any, names: dict[str, str], flushed_at: dict[str, float], since: float
) -> None:
    """Where the burst's time went, from the merge runs created since `since`: per table, from its flush
    to the first run covering it being created (the sensor) and to the last one ending, and the time
    those runs waited in the queue and ran (their process's start and the rounds); the runs and tables
    per run."""
    from dagster import RunsFilter

    from memwal_pipelines.sensors import merged_tables

    covering: dict[str, list[Any]] = {}
    runs = 0
    for record in instance.get_run_records(RunsFilter()):
        tables = merged_tables(record.dagster_run)
        if (
            not tables
            or record.create_timestamp.timestamp() < since
            or record.start_time is None
            or record.end_time is None
        ):
            continue
        runs += 1
        for name in tables:
            covering.setdefault(name, []).append(record)
    phases: dict[str, list[float]] = {"first run created": [], "last run ended": [], "queued": [], "ran": []}
    for uri, name in names.items():
        records = covering.get(name, [])
        if not records:
            continue
        phases["first run created"].append(
            min(r.create_timestamp.timestamp() for r in records) - flushed_at[uri]
        )
        phases["last run ended"].append(max(r.end_time for r in records) - flushed_at[uri])
        phases["queued"].append(sum(r.start_time - r.create_timestamp.timestamp() for r in records))
        phases["ran"].append(sum(r.end_time - r.start_time for r in records))
    print(
        f"burst merge runs: {runs}, {sum(map(len, covering.values())) / max(runs, 1):.1f} tables a run; per table, "
        "median / p95 s (its first run created and last one ended: after its flush; queued and ran: over its "
        "runs): "
        + "; ".join(f"{k} {statistics.median(v):.1f} / {p95(v):.1f}" for k, v in phases.items() if v),
        flush=True,
    )


def report_idle(idle: Idle) -> None:
    print(f"\nthe deployment over the counted window ({load()}):", flush=True)
    for part, share in idle.cpu.items():
        print(f"  {part:<36} {share * 100:6.1f}% of one core")
    print(f"  requests: {idle.requests_per_second:.1f} a second, all tables")
    if idle.ticks:
        print(
            f"  flushed-generations sensor tick: median {statistics.median(idle.ticks):.2f} s, "
            f"max {max(idle.ticks):.2f} s, over {len(idle.ticks)} ticks (interval 5 s; aim: at most half)",
            flush=True,
        )


def report_bursts(args: argparse.Namespace, bursts: tuple[list[float], dict[str, list[float]]]) -> None:
    lone, every = bursts
    p95s = sorted(p95(v) for v in every.values())
    worst = max(p95s)
    print(
        f"flush -> merged, {args.tables} tables x {args.regions} regions bursting ({args.burst_writers} written at "
        "a time): per-table p50 "
        f"median {statistics.median(statistics.median(v) for v in every.values()):.1f} s, p95 median "
        f"{statistics.median(p95s):.1f} s, worst {worst:.1f} s (aim <= 60 s); lone table p95 {p95(lone):.1f} s: "
        f"worst {worst / max(p95(lone), 1e-9):.2f}x (aim <= 3x) ({load()})"
    )


def report(
    args: argparse.Namespace,
    proxy: BillingProxy,
    hours: float,
    stored: dict[str, dict[str, tuple[int, int]]],
    runs: Counter[str],
) -> None:
    bill = proxy.bill
    factor = {
        service: 1.0 if args.real_schedules else SCHEDULES[job][2] for service, job in SERVICE_JOB.items()
    }
    print(
        f"\n{args.tables} tables x {args.regions} regions on SeaweedFS at {args.delay_ms:g} ms, "
        f"{args.writing} with a steady writer ({args.put_rate:g} puts/s of {args.put_rows} rows), "
        f"{args.minutes:g} min counted ({load()})"
    )
    print("requests per table per hour (scheduled services divided by their compression factor)")
    for table in sorted(stored):
        writing = int(table[1:]) < args.writing
        print(f"\n{table} ({'steady writer' if writing else 'idle'})")
        print(
            f"  {'who':<12}"
            + "".join(f"{k:>9}" for k in REQUEST_KINDS)
            + f"{'total':>10}{'/region/min':>13}{'USD/month':>11}"
        )
        memwal = Counter[str]()
        for service in SERVICES:
            counts = Counter[str]()
            for kind in REQUEST_KINDS:
                counts[kind] = round(bill[(table, service, kind)] / factor.get(service, 1.0) / hours)
            if not sum(counts.values()):
                continue
            if service != "writer":
                memwal.update(counts)
            per_region = sum(counts.values()) / args.regions / 60
            print(
                f"  {service:<12}"
                + "".join(f"{counts[k]:>9}" for k in REQUEST_KINDS)
                + f"{sum(counts.values()):>10}{per_region:>13.2f}{money(counts, 1.0):>11.2f}"
            )
        writers = sum(round(bill[(table, "writer", k)] / hours) for k in REQUEST_KINDS)
        total = sum(memwal.values())
        share = f", {total / writers * 100:.1f}% of the writers' own" if writers else ""
        print(
            f"  memwal, all services: {total} requests/hour, {total / args.regions / 60:.2f} per region per minute"
            f"{share}, USD {money(memwal, 1.0):.2f}/month"
        )
        merges = runs[f"{table}_merge"]
        if merges:
            merge = sum(bill[(table, "merge", k)] for k in REQUEST_KINDS)
            print(
                f"  merge runs: {merges / hours:.0f}/hour, {merge / merges / args.regions:.1f} requests per "
                f"region per run"
            )
        kinds = stored[table]
        held = sum(b for _n, b in kinds.values())
        kept = sum(b for k, (_n, b) in kinds.items() if k not in ("base table", "pending generations"))
        print(
            "  stored: "
            + "; ".join(f"{k} {n} objects {b / 1e6:.2f} MB" for k, (n, b) in sorted(kinds.items()))
        )
        print(
            f"  beyond base + pending: {kept / 1e6:.2f} MB, {kept / max(1, held - kept) * 100:.1f}% of base + pending; "
            f"storage USD {held / 1e9 * PRICES['GB_MONTH']:.4f}/month"
        )
        if proxy.ingested[table]:
            print(
                f"  ingested (the writer's PUT bytes, from its start): {proxy.ingested[table] / 1e6:.1f} MB; "
                f"held beyond base + pending per byte ingested: {kept / proxy.ingested[table]:.3f}"
            )
    print(f"\nprices (USD per 1,000 requests; per GB-month): {PRICES}")


if __name__ == "__main__":
    main()
