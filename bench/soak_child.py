"""The soak suite's child processes: one writer per region, and one loop per maintenance service.

`python -m bench.soak_child writer ...` streams random upserts, deletes and
re-inserts into its own region and key range with durable writes, logging
each operation before it is tried and once it is acknowledged (see
bench/soak_model.py). `python -m bench.soak_child service NAME ...` runs one
service (merge, catchup, snapshot, gc) in a loop through the same functions
the `memwal` command calls, printing one JSON line per run. Both are killed
with SIGKILL at random moments and restarted by bench/soak.py; storage
options (credentials) come from the environment, never the command line.

Control files in `--control DIR`: `pause` asks writers to flush and wait
(they answer with `paused-{writer}`), `stop` asks them to close and exit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, Protocol

import pyarrow as pa

OPTIONS_ENV = "SOAK_STORAGE_OPTIONS"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("w", pa.int32()),
        pa.field("v", pa.string()),
    ]
)
KEY_SCHEMA = pa.schema([SCHEMA.field("id")])


def storage_options() -> dict[str, str]:
    return dict(json.loads(os.environ.get(OPTIONS_ENV, "{}")))


class Writer(Protocol):
    """What the soak needs of a MemWAL writer."""

    def put(self, data: Any) -> int: ...

    def delete(self, keys: Any) -> int: ...

    def flush(self) -> None: ...

    def claim(self) -> str: ...

    def close(self) -> None: ...


def open_writer(uri: str, options: dict[str, str], region: str, memtable_rows: int) -> Writer:
    """The one place the soak opens a writer: `MemWalWriter` pinned to the process's region.

    Its first write claims the region (fencing any older writer) and replays
    the WAL that a killed predecessor left.
    """
    from memwal_core.services.writer import MemWalWriter

    return MemWalWriter(
        uri, options or None, region=region, durable_write=True, max_memtable_rows=memtable_rows
    )


def reclaim(uri: str, options: dict[str, str], region: str, memtable_rows: int) -> None:
    """Claim a region and close at once: the claim replays its WAL and the close flushes it."""
    writer = open_writer(uri, options, region, memtable_rows)
    try:
        writer.claim()
    finally:
        writer.close()


class OpLog:
    """The writer's append-only log: one line per event, flushed at once (a kill loses no finished line)."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", buffering=1)

    def line(self, text: str) -> None:
        self._file.write(text + "\n")
        self._file.flush()


def choose(rng: random.Random, live: set[int], dead: set[int], keys: range) -> tuple[str, list[int]]:
    """A random operation: upserts (updates and new keys), deletes of live keys, re-inserts of deleted ones."""
    roll = rng.random()
    if roll < 0.2 and live:
        return "D", rng.sample(sorted(live), min(len(live), rng.randint(1, 3)))
    if roll < 0.35 and dead:
        return "P", rng.sample(sorted(dead), min(len(dead), rng.randint(1, 3)))
    return "P", rng.sample(keys, rng.randint(1, 4))


def run_writer(args: argparse.Namespace) -> None:
    from bench.soak_model import base_rows, parse_log, value_of

    control = Path(args.control)
    log_path = Path(args.log)
    keys = range(args.key_start, args.key_start + args.key_count)
    state = parse_log(log_path, args.writer, base_rows(args.key_start, args.key_count), keys)
    live = {k for k, s in state.states.items() if s.acked is not None}
    dead = set(keys) - live
    seq = state.next_seq
    rng = random.Random(args.seed * 1_000_003 + seq)
    log = OpLog(log_path)
    options = storage_options()
    writer = _claim(args, options, control)
    while writer is not None and not (control / "stop").exists():
        if (control / "pause").exists():
            writer = _pause(writer, args, options, control, seq - 1)
            continue
        kind, batch = choose(rng, live, dead, keys)
        log.line(f"A {seq} {kind} {','.join(map(str, batch))}")
        try:
            if kind == "P":
                value = value_of(args.writer, seq)
                rows = {"id": batch, "w": [args.writer] * len(batch), "v": [value] * len(batch)}
                writer.put(pa.table(rows, schema=SCHEMA))
                live.update(batch)
                dead.difference_update(batch)
            else:
                writer.delete(pa.table({"id": batch}, schema=KEY_SCHEMA))
                live.difference_update(batch)
                dead.update(batch)
            log.line(f"K {seq}")
        except Exception as exc:
            log.line(f"F {seq} {type(exc).__name__}")
            print(f"writer {args.writer}: op {seq} failed: {str(exc)[:300]}", file=sys.stderr, flush=True)
            _close_quietly(writer)
            writer = _claim(args, options, control)
        seq += 1
        if args.interval:
            time.sleep(args.interval)
    if writer is None:
        sys.exit(3)  # stopped while the region could not be claimed
    writer.close()


def _claim(args: argparse.Namespace, options: dict[str, str], control: Path) -> Writer | None:
    """Claim the region, retrying while the store fails (the proxy drops and resets connections).

    None if asked to stop before a claim succeeded.
    """
    delay = 0.2
    while not (control / "stop").exists():
        try:
            return open_writer(args.uri, options, args.region, args.memtable_rows)
        except Exception as exc:
            print(f"writer {args.writer}: claim failed: {str(exc)[:300]}", file=sys.stderr, flush=True)
            time.sleep(delay)
            delay = min(delay * 2, 3.0)
    return None


def _close_quietly(writer: Writer) -> None:
    try:
        writer.close()
    except Exception as exc:
        print(f"close after a failure failed too: {str(exc)[:200]}", file=sys.stderr, flush=True)


def _pause(
    writer: Writer, args: argparse.Namespace, options: dict[str, str], control: Path, last_seq: int
) -> Writer | None:
    """Flush every acknowledged write into a generation, report the last operation, wait for the pause to end.

    `flush` covers only what this writer object holds; a write acknowledged by
    a killed or failed predecessor is still only in the WAL until a claim
    replays it, so a fresh claim (replay, then close) follows the flush.
    """
    try:
        writer.flush()
        reclaim(args.uri, options, args.region, args.memtable_rows)
    except Exception as exc:
        print(f"writer {args.writer}: flush failed: {str(exc)[:300]}", file=sys.stderr, flush=True)
        _close_quietly(writer)
        return _claim(args, options, control)  # try the flush again on the next loop
    marker = control / f"paused-{args.writer}"
    marker.write_text(str(last_seq))
    while (control / "pause").exists() and not (control / "stop").exists():
        time.sleep(0.05)
    marker.unlink(missing_ok=True)
    return writer


def run_service(args: argparse.Namespace) -> None:
    """Run one service in a loop; every run prints one JSON line, a failed run its error."""
    from memwal_core.model.table import MemWalTable

    os.environ.setdefault("LANCE_LOG", "error")
    run = SERVICES[args.name]
    while True:
        started = time.perf_counter()
        try:
            with MemWalTable(args.uri, storage_options()) as table:
                record = run(table, args)
            record["ok"] = True
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0][:300]
            record = {"ok": False, "error": f"{type(exc).__name__}: {first}"}
        record["seconds"] = round(time.perf_counter() - started, 3)
        print(json.dumps(record), flush=True)
        time.sleep(args.interval)


def _merge(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memwal_core.services.merge.service import merge

    result = merge(table)
    return {
        "merged": sum(len(r.merged_generations) for r in result.regions),
        "commits": len(result.regions),
        "failures": [f.error for f in result.failures],
    }


def _catchup(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memwal_core.services.catchup import catchup

    result = catchup(table)
    return {"table_version": result.version_after}


def _snapshot(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memwal_core.services.snapshot.service import build_snapshot

    result = build_snapshot(table)
    return {"table_version": result.version_after, "repairs": len(result.progress_repairs)}


def _gc(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Retention first (old versions pin merged generations), then GC with the soak's short grace."""
    from memwal_core.services.gc.rules import GcPolicy
    from memwal_core.services.gc.service import gc
    from memwal_core.services.retain import retain

    kept = retain(table, older_than=timedelta(seconds=args.retain_seconds), force=True)
    result = gc(table, dry_run=False, policy=GcPolicy(grace_seconds=args.grace_seconds)).to_json()
    return {
        "versions_removed": len(kept.removed),
        "deleted": len(result["deleted"]),
        "wal_deleted": result["wal_entries"]["deleted"],
        "manifests_deleted": result["manifest_versions_deleted"],
        "failures": [f["error"] for f in result["failures"]],
    }


SERVICES = {"merge": _merge, "catchup": _catchup, "snapshot": _snapshot, "gc": _gc}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--uri", required=True)
    w.add_argument("--region", required=True)
    w.add_argument("--writer", type=int, required=True)
    w.add_argument("--key-start", type=int, required=True)
    w.add_argument("--key-count", type=int, required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--control", required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--memtable-rows", type=int, default=40)
    w.add_argument("--interval", type=float, default=0.0)
    s = sub.add_parser("service")
    s.add_argument("name", choices=sorted(SERVICES))
    s.add_argument("--uri", required=True)
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--grace-seconds", type=float, default=5.0)
    s.add_argument("--retain-seconds", type=float, default=30.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.role == "writer":
        run_writer(args)
    else:
        run_service(args)


if __name__ == "__main__":
    main()
