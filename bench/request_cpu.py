"""Benchmark: where a request's CPU goes, and what a command's start costs (docs/width.md, "CPU per request").

Each part is measured on its own, in this process, as CPU seconds
(`time.process_time`, every thread of the process, Rust's included) over many
repetitions, so a loaded machine moves the figures less than wall time:

- HTTP and signing: a HEAD and a GET of a 300-byte object (a region manifest's
  size) through obstore on a SeaweedFS server, one at a time;
- memwal's layers over them: the same through `S3Store` (retry policy, request
  count, error mapping, `ObjectInfo`);
- thread hand-off: `ObjectStore.map` of a task that does nothing, per item, on
  a pool of 64 threads, and starting that pool;
- parsing and decoding: a version hint (JSON), a region manifest (protobuf,
  `RegionManifest.decode`), a table manifest's MemWAL details and key;
- object churn: the names and paths one region's read builds;
- a command's start: each import in a fresh interpreter (`-X importtime`
  cannot split shared dependencies, so each is its own process), minus a bare
  interpreter's start.

Usage: python bench/request_cpu.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memwal_core.storage.options import StorageOptions  # noqa: E402
from memwal_core.storage.stores import open_store  # noqa: E402

OBJECT_BYTES = 300
IMPORTS = [
    ("python -c 'import argparse, json' (the bare start)", "import argparse, json"),
    ("memwal_core.cli.main (what --version loads)", "import memwal_core.cli.main"),
    ("memwal_core.services.status", "import memwal_core.services.status"),
    ("obstore", "import obstore"),
    ("google.protobuf + memwal's messages", "import memwal_core.format.proto.memwal_pb2"),
    ("pyarrow", "import pyarrow"),
    ("pyarrow.compute", "import pyarrow.compute"),
    ("pandas", "import pandas"),
    ("lance", "import lance"),
    ("memwal_core.services.merge.service", "import memwal_core.services.merge.service"),
]


def cpu_per_call(call: Callable[[], object], count: int) -> float:
    """Microseconds of CPU per call of `call`, over `count` calls."""
    started = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - started) / count * 1e6


def import_cpu(statement: str, repeats: int = 3) -> float:
    """The least CPU seconds of a fresh interpreter running `statement`."""
    code = f"import time; {statement}; print(time.process_time())"
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
        runs.append(float(done.stdout.strip().splitlines()[-1]))
    return min(runs)


def requests_part(options: dict[str, str], count: int) -> list[tuple[str, float]]:
    import obstore
    from obstore.store import S3Store

    prefix = f"cpu-{uuid.uuid4().hex}"
    store = open_store(f"s3://bench/{prefix}", StorageOptions(options))
    store.write("o.bin", os.urandom(OBJECT_BYTES))
    bare = S3Store(
        "bench",
        prefix=prefix,
        endpoint=options["aws_endpoint"],
        region=options["aws_region"],
        access_key_id=options["aws_access_key_id"],
        secret_access_key=options["aws_secret_access_key"],
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    rows = [
        ("HEAD, bare obstore", cpu_per_call(lambda: obstore.head(bare, "o.bin"), count)),
        ("GET, bare obstore", cpu_per_call(lambda: obstore.get(bare, "o.bin").bytes(), count)),
        ("HEAD through S3Store.head", cpu_per_call(lambda: store.head("o.bin"), count)),
        ("GET through S3Store.read", cpu_per_call(lambda: store.read("o.bin"), count)),
    ]
    return rows


def local_parts(count: int) -> list[tuple[str, float]]:
    from concurrent.futures import ThreadPoolExecutor

    from memwal_core.format.naming import region_manifest_name
    from memwal_core.format.regions import RegionManifest
    from memwal_core.storage.object_store import ObjectInfo
    from tests.support.regions import write_regions

    table = Path(f"/tmp/memwal-request-cpu-{uuid.uuid4().hex}")
    write_regions(str(table), {}, 1, versions=2, generations=3, wal_entries=1, wal_hint=1)
    manifest = next(table.glob("_mem_wal/*/manifest/*.binpb"))
    data, region = manifest.read_bytes(), manifest.parent.parent.name
    version = RegionManifest.decode(data, where="x", region=region, version=_version(manifest)).version
    hint = json.dumps({"version": version}).encode()
    local = open_store(str(table))

    def pool_start() -> None:
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(int, range(64)))

    items = list(range(count))
    started = time.process_time()
    local.map(lambda _n: None, items)
    hand_off = (time.process_time() - started) / count * 1e6
    return [
        ("thread hand-off (ObjectStore.map, 64 threads, per item)", hand_off),
        ("starting and joining a 64-thread pool (per pool)", cpu_per_call(pool_start, 20)),
        ("version hint JSON", cpu_per_call(lambda: json.loads(hint), count)),
        (
            f"region manifest protobuf ({len(data)} bytes), RegionManifest.decode",
            cpu_per_call(
                lambda: RegionManifest.decode(data, where="x", region=region, version=version), count
            ),
        ),
        (
            "object churn: a manifest path and its ObjectInfo",
            cpu_per_call(
                lambda: ObjectInfo(f"_mem_wal/{region}/{region_manifest_name(version)}", 1, 0.0), count
            ),
        ),
    ]


def _version(path: Path) -> int:
    from memwal_core.format.naming import REGION_MANIFEST_SUFFIX, parse_bitrev64

    return parse_bitrev64(path.name[: -len(REGION_MANIFEST_SUFFIX)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    from tests.support.seaweed import SeaweedServer

    with SeaweedServer() as server:
        server.create_bucket("bench")
        rows = requests_part(server.storage_options(), args.requests)
    rows += local_parts(args.requests * 5)
    print(f"\nCPU per operation, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| part | CPU |")
    print("|---|---|")
    for name, micros in rows:
        print(f"| {name} | {micros:.0f} us |")
    bare = import_cpu(IMPORTS[0][1])
    print("\n| a command's start: import | CPU (minus the bare start) |")
    print("|---|---|")
    for name, statement in IMPORTS:
        seconds = import_cpu(statement)
        shown = seconds if statement == IMPORTS[0][1] else seconds - bare
        print(f"| {name} | {shown * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
