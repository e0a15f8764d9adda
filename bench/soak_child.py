"""The soak suite's child processes: writers, and one loop per maintenance service.

`python -m bench.soak_child writer ...` streams random upserts, deletes and
re-inserts of its own keys with durable writes through one `MemWalWriter`,
logging each operation before it is tried and once it is acknowledged (see
bench/soak_model.py). Its plan file names its keys and regions: one manual
region it is pinned to, or the regions of a bucketed table its keys route to
(the writer routes each put over them, in parallel). `python -m
bench.soak_child service NAME ...` runs one service (merge, catchup,
snapshot, gc) in a loop through the same functions the `memwal` command
calls, printing one JSON line per run; a merger varies its commit form and
batch budget per run, on the local or the Spark engine. Both are killed with
SIGKILL at random moments and restarted by bench/soak.py; storage options
(credentials) come from the environment, never the command line.

Control files in `--control DIR`: `pause` asks writers to flush and wait
(they answer with `paused-{writer}`: bench/soak_pause.py), `stop` asks writers to close and exit
and service loops to exit after the run in progress, `stale-{pid}` tells a
writer that was stopped (SIGSTOP) while a replacement took its regions over
that it was: woken, it tries `STALE_WRITES` puts of its stall keys (keys
only a stale writer writes, so their order is its own) and exits,
`hold-two-step` asks the next local-engine merger that commits a fenced
delete to stop there, before its upsert (it renames the file to
`held-{name}` and waits to be killed).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa

from bench.soak_pause import answer, pause_token, take_back

if TYPE_CHECKING:
    from memwal_core.services.engine import Engine

OPTIONS_ENV = "SOAK_STORAGE_OPTIONS"
HOLD_FILE = "hold-two-step"
# Seconds a Spark-engine round waits for a region's merge lease.
SPARK_LEASE_WAIT = 5.0
# Regions claimed at once when a writer claims or re-claims its regions (each claim replays its WAL).
RECLAIM_THREADS = 8
# Each writer's keys that only a stale (woken) process of it writes, and how many puts it tries.
STALL_KEYS = 4
STALE_WRITES = 3

T = TypeVar("T")

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

    schema: pa.Schema  # the table's, as the writer opened it

    def put(self, data: Any) -> int: ...

    def delete(self, keys: Any) -> int: ...

    def flush(self) -> None: ...

    def claim(self, region: str | None = None) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class WriterPlan:
    """What one writer process writes: its keys, the regions they live in, and whether it is pinned to one."""

    keys: list[int]
    regions: list[str]
    pinned: bool

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"keys": self.keys, "regions": self.regions, "pinned": self.pinned}))

    @property
    def pin(self) -> str | None:
        """The region the writer is pinned to (None: it routes by bucket)."""
        return self.regions[0] if self.pinned else None

    @classmethod
    def load(cls, path: Path) -> WriterPlan:
        data = json.loads(path.read_text())
        return cls([int(k) for k in data["keys"]], [str(r) for r in data["regions"]], bool(data["pinned"]))


def open_writer(uri: str, options: dict[str, str], region: str | None, memtable_rows: int) -> Writer:
    """The one place the soak opens a writer: `MemWalWriter`, pinned to a manual region or routing by bucket.

    Its first write to a region claims it (fencing any older writer) and
    replays the WAL that a killed predecessor left.
    """
    from memwal_core.services.writer import MemWalWriter

    return MemWalWriter(
        uri, options or None, region=region, durable_write=True, max_memtable_rows=memtable_rows
    )


def reclaim(uri: str, options: dict[str, str], regions: Sequence[str], memtable_rows: int) -> int:
    """Claim each existing region and close at once: the claim replays its WAL and the close flushes it.

    A region with no manifest yet has no WAL to replay (and a bucketed one
    must be created by routing, not by a claim). Regions are claimed several
    at a time; the first failure is raised once all were tried. Returns how
    many regions were claimed.
    """
    from memwal_core.model.table import MemWalTable

    with MemWalTable(uri, options or None) as table:
        existing = set(table.read_regions())

    def claim(region: str) -> None:
        writer = open_writer(uri, options, region, memtable_rows)
        try:
            writer.claim()
        finally:
            writer.close()

    claimed = [r for r in regions if r in existing]
    claim_each(claim, claimed)
    return len(claimed)


def claim_each(claim: Callable[[str], object], regions: Sequence[str]) -> None:
    """`claim(region)` for every region, several at once; the first failure is raised once all were tried."""
    with ThreadPoolExecutor(max_workers=RECLAIM_THREADS) as pool:
        errors = [f.exception() for f in [pool.submit(claim, r) for r in regions]]
    for error in errors:
        if error is not None:
            raise error


class OpLog:
    """The writer's append-only log: one line per event, flushed at once (a kill loses no finished line)."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", buffering=1)

    def line(self, text: str) -> None:
        self._file.write(text + "\n")
        self._file.flush()

    def event(self, what: str) -> None:
        """A moment in this process's life (`E time pid what`), to place a finding on a timeline; the
        model reads only operations."""
        self.line(f"E {time.time():.3f} {os.getpid()} {what}")


def shaped(writer: Writer, rows: dict[str, list[Any]]) -> pa.Table:
    """A put's rows with the columns the writer's table has beyond the soak's own: a nullable column
    added since the table was made (bench/chaos.py changes schemas under the writers) is null, as
    Lance reads it in the rows written before it."""
    table = pa.table(rows, schema=SCHEMA)
    for field in writer.schema:
        if field.name not in table.column_names and field.nullable:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table


def choose(rng: random.Random, live: set[int], dead: set[int], keys: list[int]) -> tuple[str, list[int]]:
    """A random operation: upserts (updates and new keys), deletes of live keys, re-inserts of deleted ones."""
    roll = rng.random()
    if roll < 0.2 and live:
        return "D", rng.sample(sorted(live), min(len(live), rng.randint(1, 3)))
    if roll < 0.35 and dead:
        return "P", rng.sample(sorted(dead), min(len(dead), rng.randint(1, 3)))
    return "P", rng.sample(keys, rng.randint(1, 4))


def stale_marker(control: Path, pid: int) -> Path:
    """The file that tells process `pid` it was woken as a stale writer (its replacement holds its regions)."""
    return control / f"stale-{pid}"


def claimed_marker(control: Path, pid: int) -> Path:
    """The file that says process `pid` holds its claimed regions (a stall then makes a stale writer)."""
    return control / f"claimed-{pid}"


def stall_keys(keys: Sequence[int]) -> list[int]:
    """The keys only a stale writer writes: the last ones but the very last (the sabotage victim)."""
    return list(keys[-STALL_KEYS - 1 : -1])


def run_writer(args: argparse.Namespace) -> None:
    from bench.soak_model import base_rows, parse_log, value_of
    from memwal_core.errors import StorageError

    control = Path(args.control)
    log_path = Path(args.log)
    plan = WriterPlan.load(Path(args.plan))
    state = parse_log(log_path, args.writer, base_rows(plan.keys), plan.keys)
    # Sabotage (to prove the audit catches a loss): one key no real operation touches gets a fake ack.
    victim = plan.keys[-1] if args.sabotage_at else None
    keys = [k for k in plan.keys if k != victim and k not in stall_keys(plan.keys)]
    live = {k for k in keys if state.states[k].acked is not None}
    dead = set(keys) - live
    # Sequence numbers from this process's own range (one per start), never from the log: a process
    # stopped before its claim and woken later reads the log after its replacement began writing, and
    # numbering from there gave both processes the same numbers (seed 1101).
    seq = args.seq_base or state.next_seq
    rng = random.Random(args.seed * 1_000_003 + seq)
    log = OpLog(log_path)
    log.event(f"start{' fence-first' if args.fence_first else ''}")
    options = storage_options()
    if args.fence_first:
        # A replacement for a stalled process: take every region over (fencing it) before writing.
        fence = functools.partial(reclaim, args.uri, options, plan.regions, args.memtable_rows)
        if _until_done(fence, args.writer, control) is None:
            sys.exit(3)
    writer = _claim(args, options, plan.pin, control, plan.regions)
    log.event("claimed")
    stale = stale_marker(control, os.getpid())
    while writer is not None and not (control / "stop").exists():
        if stale.exists():
            log.event("stale")
            stale_writes(writer, log, args.writer, seq, stall_keys(plan.keys))
            _close_quietly(writer)
            log.event("closed")
            return
        token = pause_token(control)
        if token is not None:
            writer = _pause(writer, args, options, plan, control, (log, token, seq - 1))
            continue
        if victim is not None and seq >= args.sabotage_at and state.states[victim].acked is None:
            # Logged as acknowledged, never written: exactly what a lost acknowledged write looks like.
            log.line(f"A {seq} P {victim}")
            log.line(f"K {seq}")
            victim = None
            seq += 1
            continue
        kind, batch = choose(rng, live, dead, keys)
        log.line(f"A {seq} {kind} {','.join(map(str, batch))}")
        try:
            if kind == "P":
                value = value_of(args.writer, seq)
                writer.put(
                    shaped(writer, {"id": batch, "w": [args.writer] * len(batch), "v": [value] * len(batch)})
                )
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
            if stale.exists():
                seq += 1
                continue  # a stale process: it tries its puts with the writer it has, never re-claiming
            if not isinstance(exc, StorageError):
                # Fenced, or not a storage failure: this writer object is done.
                _close_quietly(writer)
                writer = _claim(args, options, plan.pin, control, plan.regions)
            # After a storage failure (a lost response, say) `MemWalWriter` has dropped that region's
            # native writer and re-opens (re-claims) it on the next call; its other regions go on.
        seq += 1
        if args.interval:
            time.sleep(args.interval)
    if writer is None:
        sys.exit(3)  # stopped while the region could not be claimed
    writer.close()
    log.event("closed")


def stale_writes(writer: Writer, log: OpLog, writer_id: int, seq: int, keys: list[int]) -> None:
    """What a writer woken after its replacement claimed its regions tries: puts, each logged like any.

    Each must fail (the writer is fenced) or, if acknowledged, be read: the
    audit holds the stall keys to the same model as every other key. No
    failure re-claims: this process is the stale one.
    """
    from bench.soak_model import value_of

    for i in range(STALE_WRITES):
        key = keys[(seq + i) % len(keys)]
        log.line(f"A {seq + i} P {key}")
        try:
            writer.put(shaped(writer, {"id": [key], "w": [writer_id], "v": [value_of(writer_id, seq + i)]}))
            log.line(f"K {seq + i}")
        except Exception as exc:
            log.line(f"F {seq + i} {type(exc).__name__}")
            print(f"stale writer {writer_id}: put refused: {str(exc)[:200]}", file=sys.stderr, flush=True)


def _claim(
    args: argparse.Namespace, options: dict[str, str], pin: str | None, control: Path, regions: list[str]
) -> Writer | None:
    """Open the writer and claim its existing regions (several at once: one by one, a writer of 21
    regions took most of a pause to restart), retrying while the store fails (the proxy drops and
    resets connections). Claiming every region at once (not at its first write) means a writer
    stopped later holds all of them, so each can fence it.

    The claimed marker exists only while this process holds a claimed writer,
    so the soak stalls writers that write (one stalled mid-claim is refused
    when woken and never tries a stale put). None if asked to stop before the
    claim succeeded, or if a failed attempt finds this process stale.
    """
    from memwal_core.model.table import MemWalTable

    def attempt() -> Writer:
        writer = open_writer(args.uri, options, pin, args.memtable_rows)
        try:
            with MemWalTable(args.uri, options or None) as table:
                existing = {r for r, m in table.read_regions(regions).items() if m is not None}
            claim_each(writer.claim, [r for r in regions if r in existing])
        except Exception:
            _close_quietly(writer)
            raise
        return writer

    marker = claimed_marker(control, os.getpid())
    marker.unlink(missing_ok=True)
    writer = _until_done(attempt, args.writer, control)
    if writer is not None:
        marker.touch()
    return writer


def _until_done(attempt: Callable[[], T], writer_id: int, control: Path) -> T | None:
    """`attempt()`, again after each failure (with a growing delay) until it succeeds.

    None if asked to stop first, or if a failed attempt finds this process
    stale: woken after its replacement took over, claiming on would fence the
    replacement, be fenced by its re-claim, and so on (seed 11: for minutes).
    """
    delay = 0.2
    while not (control / "stop").exists():
        try:
            return attempt()
        except Exception as exc:
            print(f"writer {writer_id}: claim failed: {str(exc)[:300]}", file=sys.stderr, flush=True)
            if stale_marker(control, os.getpid()).exists():
                return None
            time.sleep(delay)
            delay = min(delay * 2, 3.0)
    return None


def _close_quietly(writer: Writer) -> None:
    try:
        writer.close()
    except Exception as exc:
        print(f"close after a failure failed too: {str(exc)[:200]}", file=sys.stderr, flush=True)


def _pause(
    writer: Writer,
    args: argparse.Namespace,
    options: dict[str, str],
    plan: WriterPlan,
    control: Path,
    pause: tuple[OpLog, str, int],
) -> Writer | None:
    """Flush every acknowledged write into a generation, answer the pause (its token, the last operation),
    wait for it to end.

    This writer claimed every existing region when it opened (replaying what a
    killed predecessor acknowledged) and creates the others by routing, so
    `flush` covers them all: it closes the regions holding rows and settles
    those whose native writer was dropped after a failure (a fresh claim
    replays and closes them). Regions with nothing to flush keep their claim.
    """
    from memwal_core.errors import StorageError

    log, token, last_seq = pause
    try:
        writer.flush()
    except Exception as exc:
        print(f"writer {args.writer}: flush failed: {str(exc)[:300]}", file=sys.stderr, flush=True)
        if isinstance(exc, StorageError) or stale_marker(control, os.getpid()).exists():
            # Flushed again on the next loop. After a storage failure the same writer settles the
            # regions whose close failed (a claim and a close each); closing it and claiming every
            # region again, one by one, made a pause of 64 regions take minutes. A stale process
            # (stopped during the flush and woken) never re-claims.
            return writer
        _close_quietly(writer)
        return _claim(args, options, plan.pin, control, plan.regions)  # flush again on the next loop
    answer(control, args.writer, token, last_seq)
    log.event(f"paused {token}")
    while pause_token(control) == token and not (control / "stop").exists():
        time.sleep(0.05)
    take_back(control, args.writer)
    log.event("resumed")
    return writer


def run_service(args: argparse.Namespace) -> None:
    """Run one service in a loop; every run prints one JSON line, a failed run its error."""
    from memwal_core.model.table import MemWalTable

    os.environ.setdefault("LANCE_LOG", "error")
    run = SERVICES[args.name]
    if args.name == "merge":
        args.merge_engine = merge_engine(args.engine, args.spark_master)
        # The commit is the driver's on either engine; a killed Spark merger would reboot its JVM.
        if args.engine != "spark":
            hold_after_fenced_delete(Path(args.control), args.label or args.name)
    stop = Path(args.control) / "stop"
    while True:  # at least one run, even when asked to stop during start-up (a Spark session boots slowly)
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
        wake = time.monotonic() + args.interval
        while time.monotonic() < wake and not stop.exists():
            time.sleep(0.1)
        if stop.exists():
            return


def hold_after_fenced_delete(control: Path, name: str) -> None:
    """Fault injection for the soak: stop between a two-step commit's fenced delete and its upsert.

    Wraps the merge's `delete_fenced` in this process only. Once the soak
    arms it (`control/hold-two-step`), the next fenced delete that removed
    rows renames the file to `held-{name}` (one merger wins the rename) and
    sleeps, its leases held, until the soak kills it with SIGKILL: the table
    then has the delete committed and the marked upsert not.
    """
    from memwal_core.services.merge import commit

    fenced_delete: Callable[..., int] = commit.delete_fenced

    def delete_then_hold(*args: Any, **kwargs: Any) -> int:
        deleted = fenced_delete(*args, **kwargs)
        if deleted:
            try:
                os.rename(control / HOLD_FILE, control / f"held-{name}")
            except FileNotFoundError:  # not armed, or another merger took it
                return deleted
            print(f"{name}: holding after a fenced delete of {deleted} rows", file=sys.stderr, flush=True)
            while True:
                time.sleep(1)
        return deleted

    commit.delete_fenced = delete_then_hold


def _merge(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One round with a random commit form, batch budget and generation cap, on this merger's engine."""
    from memwal_core.services.defaults import COMMIT_FORMS
    from memwal_core.services.merge.batch import MergeBudget
    from memwal_core.services.merge.service import merge

    engine = args.merge_engine
    rng = random.Random()
    form = rng.choice(COMMIT_FORMS)
    # A small row budget cuts the round into several batches (commits); None: the machine's default.
    max_rows = rng.choice([None, None, 20, 80])
    result = merge(
        table,
        engine=engine,
        commit_form=form,
        budget=MergeBudget.default(max_rows=max_rows),
        max_generations=rng.choice([None, None, 1, 2]),
        # A Spark round is rare: it waits for a region the local merger holds rather than skip it.
        lease_wait=SPARK_LEASE_WAIT if engine.name == "spark" else 0.0,
    )
    return {
        "engine": engine.name,
        "commit_form": form,
        "max_batch_rows": max_rows,
        "merged": sum(len(r.merged_generations) for r in result.regions),
        "commits": len(result.regions),
        "batches": len(result.batches),
        "forms": dict(Counter(b.commit_form for b in result.batches)),
        "failures": [f.error for f in result.failures],
    }


def merge_engine(name: str, spark_master: str) -> Engine:
    """A merger's engine for as long as its process lives (a Spark session boots here, once, without UI)."""
    from memwal_core.services.engine import LocalEngine, SparkEngine
    from memwal_core.spark_session import spark_session

    if name == "spark":
        return SparkEngine(spark_session(spark_master, {"spark.ui.enabled": "false"}))
    return LocalEngine()


def _catchup(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memwal_core.services.catchup import catchup

    result = catchup(table)
    return {"table_version": result.version_after}


def _snapshot(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memwal_core.services.snapshot.service import build_snapshot

    result = build_snapshot(table)
    return {"table_version": result.version_after, "repairs": len(result.progress_repairs)}


def _gc(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Retention first (old versions pin merged generations), then GC with the soak's short grace.

    The fence retention is at its shortest (a day): WAL entries and manifest versions stay that long,
    so a writer stalled for less finds every slot it may write to taken.
    """
    from memwal_core.services.defaults import MIN_FENCE_RETENTION_SECONDS
    from memwal_core.services.gc.rules import GcPolicy
    from memwal_core.services.gc.service import gc
    from memwal_core.services.retain import retain

    kept = retain(table, older_than=timedelta(seconds=args.retain_seconds), force=True)
    policy = GcPolicy(grace_seconds=args.grace_seconds, fence_retention_seconds=MIN_FENCE_RETENTION_SECONDS)
    result = gc(table, dry_run=False, policy=policy).to_json()
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
    w.add_argument("--plan", required=True, help="the WriterPlan JSON file: keys and regions")
    w.add_argument("--writer", type=int, required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--control", required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--memtable-rows", type=int, default=40)
    w.add_argument("--interval", type=float, default=0.0)
    w.add_argument("--sabotage-at", type=int, default=0, help="fake one acknowledged put from this op on")
    w.add_argument("--seq-base", type=int, default=0, help="this process's first sequence number, at least")
    w.add_argument(
        "--fence-first", action="store_true", help="claim every region once before writing (a replacement)"
    )
    s = sub.add_parser("service")
    s.add_argument("name", choices=sorted(SERVICES))
    s.add_argument("--uri", required=True)
    s.add_argument("--control", required=True)
    s.add_argument("--label", help="this loop's name in control files (default: the service)")
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--grace-seconds", type=float, default=5.0)
    s.add_argument("--retain-seconds", type=float, default=30.0)
    s.add_argument("--engine", choices=["local", "spark"], default="local")
    s.add_argument("--spark-master", default="local[1,2]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.role == "writer":
        run_writer(args)
    else:
        run_service(args)


if __name__ == "__main__":
    main()
