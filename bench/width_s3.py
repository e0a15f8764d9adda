"""Benchmark: every command and the sensor tick at 1,000 regions on S3 (or Azure) with real latency.

Setup: a SeaweedFS server (as the tests start it; `--store azure`: Azurite) behind two proxies from
`tests.support.proxy`, one forwarding at once and one holding each request
`--delay-ms` (default 20, a cloud store's first-byte latency); both count
requests. The table: a 100k-row base with a BTree on the key, then
`--regions` regions x 1 generation x 200 rows written by pylance's native
MemWAL writer, then a region snapshot (`memwal snapshot`, as the pipeline's
schedule keeps one). It is built once on local disk (cached under `--cache`)
and uploaded to one bucket prefix per proxy, so both runs start from
identical tables. Each command runs as a whole process (`memwal ... --json`), in the
order below, on its proxy's table; the sensor rows run the
`flushed_generations` sensor's tick in a process of its own, first without a
cursor, then with the cursor the first tick left (nothing changed since),
and time the tick alone: Dagster evaluates sensors in its long-lived code
server, so the process start (importing Dagster) is not part of a tick.

Per row, beside the figures the ratios the issue-35 aims are stated in:
- the latency floor: the row's own requests / requests in flight
  (`max_concurrent_requests`, 64) x the delay, and wall / floor at the delay
  (aim: wall <= 2 x floor + 1 s);
- CPU per request: the command process's CPU at 0 ms (the whole process, its
  start included; the sensor rows: the tick's own) / its requests, next to a
  bare obstore loop in the same run: a process issuing the same number of
  HEADs and GETs (the row's HEADs as HEADs, every other request as a GET) of
  small objects through the same proxy, as many in flight, in two forms (sync
  calls on threads, and asyncio); the cheaper one is the reference (aim: <= 3x);
- the bare loop's own wall / floor at the delay: what this machine's proxy and
  server allow at all.
The load average is printed beside: on a shared machine quote ratios.

`--regions 10000` (or any count above 2,000) runs the status and sensor-tick
rows only, on a table whose regions hold manifests written directly (the
only thing those rows read) instead of data.

`--code DIR` runs the commands and the sensor from another checkout of memwal
(`git worktree add DIR main`), so two versions compare on one machine's load.

Usage: python bench/width_s3.py [--store s3|azure] [--regions 1000] [--delay-ms 20] [--cache DIR] [--code DIR]
       [-o KEY=VALUE]...
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

from bench.compiled import compile_checkout  # noqa: E402
from memwal_core.storage.options import StorageOptions  # noqa: E402
from memwal_core.storage.stores import open_store  # noqa: E402

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
    ]
)
BASE_ROWS = 100_000
ROWS_PER_REGION = 200
# Above this, only the status and sensor rows run, on manifests written directly.
DATA_REGIONS_LIMIT = 2_000
COMMANDS = [
    ("status", ["status"]),
    ("merge --dry-run", ["merge", "--dry-run"]),
    ("merge (one round)", ["merge"]),
    ("catchup", ["catchup"]),
    ("snapshot", ["snapshot"]),
    ("gc --dry-run", ["gc", "--dry-run"]),
    ("gc", ["gc"]),
]
# The servers `--store` names, as the report names them.
SERVERS = {"s3": "SeaweedFS", "azure": "Azurite"}
# The bare loop's objects: small, as region manifests are.
BARE_OBJECTS = 1000
BARE_OBJECT_BYTES = 300
BARE = """
import asyncio, json, os, sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
import obstore
from obstore.store import AzureStore, S3Store
options, heads, gets, in_flight, form = json.loads(sys.argv[1]), *map(int, sys.argv[2:5]), sys.argv[5]
bare = {"client_options": {"allow_http": True}, "retry_config": {"max_retries": 0}}
if "aws_endpoint" in options:
    store = S3Store(
        "width", prefix="bare", endpoint=options["aws_endpoint"], region=options["aws_region"],
        access_key_id=options["aws_access_key_id"], secret_access_key=options["aws_secret_access_key"],
        virtual_hosted_style_request=False, **bare,
    )
else:
    store = AzureStore(
        "width", prefix="bare", endpoint=options["azure_storage_endpoint"],
        account_name=options["azure_storage_account_name"], account_key=options["azure_storage_account_key"],
        **bare,
    )
work = [("head", f"o{n % 1000:04d}") for n in range(heads)] + [("get", f"o{n % 1000:04d}") for n in range(gets)]
if form == "threads":
    def one(item):
        kind, path = item
        obstore.head(store, path) if kind == "head" else obstore.get(store, path).bytes()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(one, work))
else:
    async def main():
        gate = asyncio.Semaphore(in_flight)
        async def one(kind, path):
            async with gate:
                if kind == "head":
                    await obstore.head_async(store, path)
                else:
                    await (await obstore.get_async(store, path)).bytes_async()
        await asyncio.gather(*(one(k, p) for k, p in work))
    asyncio.run(main())
# Out without finalizing: obstore's runtime threads can still hand a completion to an asyncio loop
# being torn down, which aborted one exit in a dozen.
os._exit(0)
"""
TICK = """
import json, os, sys, time
from dagster import DagsterInstance, build_sensor_context
from memwal_pipelines.config import TableConfig
from memwal_pipelines.build import build_definitions
uri, cursor_file = sys.argv[1], sys.argv[2]
table = TableConfig(name="width", uri=uri, storage_options_env="WIDTH_OPTIONS")
definitions = build_definitions([table])
sensor = definitions.resolve_sensor_def("memwal_flushed_generations")
cursor = open(cursor_file).read() or None
with DagsterInstance.ephemeral() as instance, build_sensor_context(
    instance=instance, cursor=cursor, resources=definitions.resources
) as context:
    started, cpu = time.perf_counter(), time.process_time()
    result = sensor(context)
    print(time.perf_counter() - started, time.process_time() - cpu)
open(cursor_file, "w").write(result.cursor or "")
"""


def build_data_table(path: Path, regions: int) -> None:
    """The base table, then one generation of ROWS_PER_REGION rows per region through Lance's writer."""
    ids = np.arange(BASE_ROWS, dtype=np.int64)
    dataset = lance.write_dataset(pa.table({"id": ids, "n": ids * 10}, schema=SCHEMA), str(path))
    dataset.create_scalar_index("id", "BTREE")
    dataset.initialize_mem_wal()
    for r in range(regions):
        keys = np.arange(r, BASE_ROWS, regions, dtype=np.int64)[:ROWS_PER_REGION]
        with lance.dataset(str(path)).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=10_000) as writer:
            writer.put(pa.table({"id": keys, "n": keys * 10 + 1}, schema=SCHEMA))


def build_manifest_table(path: Path, regions: int) -> None:
    """The base table and `regions` regions of directly written manifests (see tests.support.regions)."""
    from tests.support.regions import write_regions

    ids = np.arange(1000, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "n": ids}, schema=SCHEMA), str(path)).initialize_mem_wal()
    write_regions(str(path), {}, regions, versions=2, generations=1, wal_entries=1, wal_hint=1)


def cached_table(cache: Path, regions: int) -> Path:
    """The local table for `regions` regions, with a region snapshot, built on first use."""
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.snapshot.service import build_snapshot

    # "-2": with memwal's copy of the snapshot's versions (a cache built before it has none).
    path = cache / f"regions-{regions}-snapshot-2"
    if (path / "_versions").is_dir():
        return path
    started = time.perf_counter()
    staging = cache / f"building-{regions}-{os.getpid()}"
    (build_data_table if regions <= DATA_REGIONS_LIMIT else build_manifest_table)(staging, regions)
    with MemWalTable.open(str(staging)) as table:
        build_snapshot(table)
    staging.rename(path)
    print(f"built {path} in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def upload(local: Path, uri: str, options: dict[str, str]) -> None:
    store = open_store(uri, StorageOptions(options))
    files = [p for p in local.rglob("*") if p.is_file()]
    store.map(lambda p: store.write(p.relative_to(local).as_posix(), p.read_bytes()), files)


def code_env(code: Path) -> dict[str, str]:
    """The environment that runs memwal (its CLI and pipelines) from the checkout `code`."""
    return {**os.environ, "PYTHONPATH": str(code)}


def run(command: list[str], what: str, **kwargs: Any) -> str:
    """The standard output of `command`; SystemExit naming `what` and the end of its stderr if it fails."""
    done: subprocess.CompletedProcess[str] = subprocess.run(
        command, capture_output=True, text=True, check=False, **kwargs
    )
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def memwal(
    args: list[str], uri: str, options: dict[str, str], extra: list[str], code: Path
) -> dict[str, object]:
    flags = [f"-o{k}={v}" for k, v in options.items()] + [f"-o{e}" for e in extra]
    command = [sys.executable, "-m", "memwal_core.cli.main", "--json", *args, uri, *flags]
    result: dict[str, object] = json.loads(
        run(command, f"memwal {' '.join(args)}", cwd=code, env=code_env(code))
    )
    if result.get("failures"):
        raise SystemExit(f"memwal {' '.join(args)}: failures {result['failures']}")
    return result


def tick(uri: str, options: dict[str, str], cursor: Path, code: Path) -> tuple[float, float]:
    """Seconds and CPU seconds of one sensor tick, evaluated in a process of its own."""
    env = {**code_env(code), "WIDTH_OPTIONS": json.dumps(options), "DAGSTER_HOME": str(cursor.parent)}
    out = run([sys.executable, "-c", TICK, uri, str(cursor)], "sensor tick", env=env, cwd=code)
    wall, cpu = out.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Row:
    """One command at one delay: requests (all, and HEADs), wall seconds, CPU seconds."""

    requests: int
    heads: int
    wall: float
    cpu: float


def bare_loop(options: dict[str, str], heads: int, gets: int, in_flight: int, form: str) -> Row:
    """The bare obstore loop in a process of its own; its CPU is the whole process's, as a command's is."""
    cpu = _child_cpu()
    started = time.perf_counter()
    arguments = [json.dumps(options), str(heads), str(gets), str(in_flight), form]
    run([sys.executable, "-c", BARE, *arguments], f"bare obstore loop ({form})")
    return Row(heads + gets, heads, time.perf_counter() - started, _child_cpu() - cpu)


def upload_bare_objects(server: Any) -> None:
    store = open_store(f"{server.scheme}://width/bare", StorageOptions(server.storage_options()))
    store.map(lambda n: store.write(f"o{n:04d}", os.urandom(BARE_OBJECT_BYTES)), list(range(BARE_OBJECTS)))


def run_delay(
    args: argparse.Namespace, server: Any, delay: float, local: Path, work: str
) -> dict[str, tuple[Row, Row]]:
    """Every row at one delay: the command's figures and the cheaper bare loop's for the same requests."""
    from tests.support.proxy import LatencyProxy

    rows: dict[str, tuple[Row, Row]] = {}
    with LatencyProxy(server.port, delay=delay) as proxy:
        options = proxy.storage_options(server.storage_options())
        uri = f"{server.scheme}://width/t{int(delay * 1000)}"
        started = time.perf_counter()
        upload(local, uri, server.storage_options())
        print(f"uploaded to {uri} in {time.perf_counter() - started:.0f} s", flush=True)
        steps: list[tuple[str, list[str] | None]] = [("status", ["status"])]
        steps += [("sensor tick (no cursor)", None), ("sensor tick (cursor)", None)]
        if args.regions <= DATA_REGIONS_LIMIT:
            steps += COMMANDS[1:]
        cursor = Path(work) / f"cursor-{delay}"
        cursor.write_text("")
        for label, command in steps:
            proxy.reset()
            cpu = _child_cpu()
            started = time.perf_counter()
            if command is None:
                seconds, cpu_seconds = tick(uri, options, cursor, args.code)
            else:
                memwal(command, uri, options, args.extra, args.code)
                seconds, cpu_seconds = time.perf_counter() - started, _child_cpu() - cpu
            found = Row(proxy.total(), proxy.counts["HEAD"], seconds, cpu_seconds)
            bare = min(
                (
                    bare_loop(options, found.heads, found.requests - found.heads, args.in_flight, form)
                    for form in ("threads", "asyncio")
                ),
                key=lambda row: row.cpu,
            )
            rows[label] = (found, bare)
            print(
                f"  {label} at {delay * 1000:g} ms: {found.requests} requests, {seconds:.1f} s, "
                f"CPU {cpu_seconds:.2f} s; bare loop {bare.wall:.1f} s, CPU {bare.cpu:.2f} s "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return rows


def report(args: argparse.Namespace, by_delay: dict[float, dict[str, tuple[Row, Row]]]) -> None:
    slow = args.delay_ms / 1000
    fast, delayed = by_delay[0.0], by_delay[slow]
    print(
        f"\n{args.regions} regions, {SERVERS[args.store]} through a {args.delay_ms:g} ms proxy (whole processes), "
        f"{args.in_flight} requests in flight; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print(
        f"| command | requests | floor | {args.delay_ms:g} ms wall | wall/floor | aim 2xfloor+1 s | 0 ms wall "
        "| CPU at 0 ms | CPU/request | bare CPU/request | ratio | bare wall/floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, (found, bare) in fast.items():
        late, late_bare = delayed[label]
        floor = late.requests / args.in_flight * slow
        per_request, bare_per_request = found.cpu / found.requests, bare.cpu / bare.requests
        print(
            f"| {label} | {found.requests:,} | {floor:.2f} s | {late.wall:.1f} s | {late.wall / floor:.1f} "
            f"| {'met' if late.wall <= 2 * floor + 1 else 'missed'} | {found.wall:.1f} s | {found.cpu:.1f} s "
            f"| {per_request * 1e6:.0f} us | {bare_per_request * 1e6:.0f} us "
            f"| {per_request / bare_per_request:.1f} | {late_bare.wall / floor:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=sorted(SERVERS), default="s3", help="the server the tables are on")
    parser.add_argument("--regions", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memwal-width-cache")
    parser.add_argument("-o", dest="extra", action="append", default=[], help="extra storage option")
    parser.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="run the commands and the sensor from this checkout of memwal (to compare two versions)",
    )
    args = parser.parse_args()
    args.in_flight = StorageOptions.parse(args.extra).max_concurrent_requests()
    args.cache.mkdir(parents=True, exist_ok=True)
    local = cached_table(args.cache, args.regions)
    compile_checkout(args.code)

    from tests.support.azurite import AzuriteServer
    from tests.support.seaweed import SeaweedServer

    server: Any = SeaweedServer() if args.store == "s3" else AzuriteServer()
    with server, tempfile.TemporaryDirectory() as work:
        if args.store == "s3":
            server.create_bucket("width")
        else:
            server.create_container("width")
        upload_bare_objects(server)
        by_delay = {
            delay: run_delay(args, server, delay, local, work) for delay in (0.0, args.delay_ms / 1000)
        }
    report(args, by_delay)


if __name__ == "__main__":
    main()
