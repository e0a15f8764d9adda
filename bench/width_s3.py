"""Benchmark: every command and the sensor tick at 1,000 regions on S3 with real latency.

Setup: a SeaweedFS server (as the tests start it) behind two proxies from
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

Prints per row: requests (every request the process made, Lance's included),
requests per region, seconds at 0 ms and at the delay, their ratio, and the
command process's CPU seconds at 0 ms (on a shared machine, wall time also
shows the load of everything else).
`--regions 10000` (or any count above 2,000) runs the status and sensor-tick
rows only, on a table whose regions hold manifests written directly (the
only thing those rows read) instead of data.

Usage: python bench/width_s3.py [--regions 1000] [--delay-ms 20] [--cache DIR] [-o KEY=VALUE]...
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
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

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
    started = time.perf_counter()
    result = sensor(context)
    print(time.perf_counter() - started)
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

    path = cache / f"regions-{regions}-snapshot"
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
    store.close()


def memwal(args: list[str], uri: str, options: dict[str, str], extra: list[str]) -> dict[str, object]:
    flags = [f"-o{k}={v}" for k, v in options.items()] + [f"-o{e}" for e in extra]
    done = subprocess.run(
        [str(Path(sys.executable).parent / "memwal"), "--json", *args, uri, *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"memwal {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout)
    if result.get("failures"):
        raise SystemExit(f"memwal {' '.join(args)}: failures {result['failures']}")
    return result


def tick(uri: str, options: dict[str, str], cursor: Path) -> float:
    """Seconds of one sensor tick, evaluated in a process of its own."""
    env = {**os.environ, "WIDTH_OPTIONS": json.dumps(options), "DAGSTER_HOME": str(cursor.parent)}
    done = subprocess.run(
        [sys.executable, "-c", TICK, uri, str(cursor)], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"sensor tick failed: {done.stderr.strip()[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memwal-width-cache")
    parser.add_argument("-o", dest="extra", action="append", default=[], help="extra storage option")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    local = cached_table(args.cache, args.regions)

    from tests.support.proxy import LatencyProxy
    from tests.support.seaweed import SeaweedServer

    rows: dict[str, dict[float, tuple[int, float, float]]] = {}
    with SeaweedServer() as server, tempfile.TemporaryDirectory() as work:
        server.create_bucket("width")
        upstream = server.ports["s3.port"]
        for delay in (0.0, args.delay_ms / 1000):
            with LatencyProxy(upstream, delay=delay) as proxy:
                options = proxy.storage_options(server.storage_options())
                uri = f"s3://width/t{int(delay * 1000)}"
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
                        seconds = tick(uri, options, cursor)
                    else:
                        memwal(command, uri, options, args.extra)
                        seconds = time.perf_counter() - started
                    rows.setdefault(label, {})[delay] = (proxy.total(), seconds, _child_cpu() - cpu)
                    print(
                        f"  {label} at {delay * 1000:g} ms: {proxy.total()} requests, {seconds:.1f} s",
                        flush=True,
                    )
    slow = args.delay_ms / 1000
    print(f"\n{args.regions} regions, SeaweedFS through a {args.delay_ms:g} ms proxy (whole processes)\n")
    print(f"| command | requests | requests/region | 0 ms | {args.delay_ms:g} ms | ratio | CPU at 0 ms |")
    print("|---|---|---|---|---|---|---|")
    for label, by_delay in rows.items():
        requests, fast, cpu = by_delay[0.0]
        delayed = by_delay[slow][1]
        print(
            f"| {label} | {requests:,} | {requests / args.regions:.2f} | {fast:.1f} s | {delayed:.1f} s "
            f"| {delayed / fast:.2f} | {cpu:.1f} s |"
        )


if __name__ == "__main__":
    main()
