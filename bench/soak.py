"""Soak and fault-injection suite: writers, every service and failures at once, with nothing acknowledged lost.

Two tables, one on SeaweedFS (started here on 127.0.0.1, reached through the
suite's own fault-injecting proxy) and one on local disk; with `--azure` a
third on Azurite (the same way; `--azure --skip-s3 --skip-local`: that one alone). Per table: several
writer processes stream random upserts, deletes and re-inserts of their own
keys with durable writes and log what was acknowledged. Without `--regions`
each writer is pinned to one manual region; with `--regions R` the table is
bucketed by key into R regions, each writer process owns the keys of R/W of
them and its one `MemWalWriter` routes every put over its regions. Merge
(local engine; random commit form, batch budget and generation cap per
round), an occasional Spark-engine merge, catch-up, snapshot and GC (with
retention and a short grace period) run in loops in their own processes.
Writers and services are killed with SIGKILL at random moments and
restarted. Now and then a writer is stopped (SIGSTOP) instead, at a random
moment, and a replacement takes its regions over (fencing it) and writes
on; the stopped writer is held while merges and GCs run (GC at its most
aggressive settings: no grace, the shortest fence retention), then woken,
and tries puts of keys only a stale writer writes: each must fail, or be read.
Now and then the soak arms a hold that stops the next two-step
merge commit between its fenced delete and its upsert, kills that merger
there, and checks the MemWAL-aware read at once, with the other mergers
stopped. An auditor samples every table version (merge progress never goes
down), checks that no pending generation's directory is missing, and at
quiescent points (writers paused and flushed) compares the MemWAL-aware
read with the model of acknowledged writes. At the end faults stop, writers
close, the services drain (the last GC planned as if the fence retention had
passed), and the base table must equal the model with nothing pending and GC
having left only the newest manifests and no covered WAL entry.

Usage:
    python bench/soak.py --short              # CI: about two minutes
    python bench/soak.py --short --skip-local --regions 32 --seed 7
    python bench/soak.py --minutes 30 --regions 64   # long mode
Exit status 0: no loss, no invariant break; 1: the summary lists the evidence.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.soak_child import (  # noqa: E402
    HOLD_FILE,
    OPTIONS_ENV,
    SCHEMA,
    WriterPlan,
    claimed_marker,
    reclaim,
    stale_marker,
    stall_keys,
)
from bench.soak_model import SEQ_STRIDE, Mismatch, WriterLog, base_rows, compare, parse_log  # noqa: E402
from bench.soak_pause import all_paused, end_pause, request_pause  # noqa: E402
from bench.soak_proxy import FaultProxy, FaultRates  # noqa: E402
from memwal_core.errors import MemWalNotEnabledError, NotFoundError, StorageError  # noqa: E402
from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, generation_from_dir_name  # noqa: E402
from memwal_core.model.region_directory import region_id_for  # noqa: E402
from memwal_core.model.routing import RegionSpec, region_spec_of  # noqa: E402
from memwal_core.model.table import MemWalTable  # noqa: E402
from memwal_core.services.merge.staged import ROWS_PER_TASK_ENV  # noqa: E402
from tests.support.proxy import retarget  # noqa: E402

KEY_STRIDE = 1_000_000
SERVICES = ("merge", "catchup", "snapshot", "gc")
# After the drain, GC with this policy must leave at most this many manifest versions.
FINAL_KEEP_MANIFESTS = 10
RECOVERY_MEMTABLE_ROWS = 100_000
# Each writer's MemTable row limit per region with `--regions` (default; `--memtable-rows` sets it):
# at 32 regions this doubled the writes acknowledged and quadrupled the generations merged.
WIDE_MEMTABLE_ROWS = 8
# How long a service loop may take to finish its run in progress once asked to stop.
SERVICE_STOP_SECONDS = 60.0
# How long a woken stale writer may take to try its puts and exit.
STALE_EXIT_SECONDS = 60.0


@dataclass(frozen=True)
class SoakConfig:
    """How long, how many writers, and how often things fail."""

    minutes: float
    writers: int = 3
    keys_per_writer: int = 300
    memtable_rows: int = 40
    kill_every_seconds: float = 5.0
    quiesce_every_seconds: float = 60.0
    grace_seconds: float = 3.0
    retain_seconds: float = 60.0
    service_interval: float = 1.0
    writer_interval: float = 0.0
    rates: FaultRates = field(default_factory=FaultRates)
    seed: int = 1
    targets: tuple[str, ...] = ("s3", "local")
    # None: one manual region per writer; else a table bucketed by key into this many regions.
    regions: int | None = None
    # Seconds between Spark-engine merge rounds (one Spark merger per table); 0: none.
    spark_every_seconds: float = 30.0
    # Whether random kills may hit the Spark merger (its restart boots a JVM).
    spark_killable: bool = True
    # Seconds between arming the hold that stops a two-step merge commit after its fenced delete.
    hold_every_seconds: float = 45.0
    # Sabotage, to prove the audit catches a loss: writer 0 fakes one acknowledged put from this op on.
    sabotage_at: int = 0
    # Seconds between stalling a writer (SIGSTOP, replaced, held across merges and GCs, woken); 0: never.
    stall_every_seconds: float = 40.0
    # A stalled writer is woken once a merge and a GC have run since it stopped, within these bounds.
    stall_min_seconds: float = 4.0
    stall_max_seconds: float = 30.0


SHORT = SoakConfig(
    minutes=1.2,
    writers=2,
    quiesce_every_seconds=35.0,
    kill_every_seconds=4.0,
    spark_every_seconds=10.0,
    spark_killable=False,
    hold_every_seconds=30.0,
    stall_every_seconds=25.0,
)


@dataclass(frozen=True)
class Violation:
    """One loss or invariant break, with where to look."""

    target: str
    kind: str
    table_version: int | None
    region: str | None
    generation: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Child:
    """One child process (writer or service loop), restartable; killed and stopped by its PID only."""

    def __init__(
        self,
        target: str,
        name: str,
        argv: list[str],
        env: dict[str, str],
        out_dir: Path,
        *,
        killable: bool = True,
    ) -> None:
        self.target = target
        self.killable = killable
        self.name = name
        self.argv = argv
        self.env = env
        self.stdout_path = out_dir / f"{name}.out"
        self.stderr_path = out_dir / f"{name}.err"
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.crashes = 0
        self.restart_at: float | None = None
        # Arguments added at each start (a writer's sequence number range).
        self.more_argv: Callable[[], list[str]] = list
        # Stopped with SIGSTOP since (monotonic), and the service runs seen then; None when running.
        self.stalled: tuple[float, int, int] | None = None
        # A stale writer woken to try its puts: it exits by itself and is never restarted.
        self.retired = False

    @property
    def is_writer(self) -> bool:
        return self.name.startswith("writer")

    def start(self) -> None:
        with self.stdout_path.open("ab") as out, self.stderr_path.open("ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.soak_child", *self.argv, *self.more_argv()],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.restart_at = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.kills += 1

    def stop(self, timeout: float) -> bool:
        """Wait up to `timeout` for a clean exit, then SIGKILL; True if it exited by itself."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            return False

    def terminate(self) -> None:
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGTERM)
        self.stop(10)

    def stderr_tail(self, lines: int = 5) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class AuditStats:
    versions_audited: int = 0
    versions_unsampled: int = 0
    max_merge_lag: int = 0
    quiescent_checks: int = 0
    checks_after_two_step_kill: int = 0
    # Time spent waiting for the writers to flush and re-claim their regions before the checks: in all,
    # and the longest one pause took.
    seconds_to_pause: float = 0.0
    max_seconds_to_pause: float = 0.0
    inconclusive_reads: int = 0
    # Acknowledged writes the MemWAL-aware read lacked after the writers stopped, before their WALs were replayed.
    acked_only_in_wal_at_stop: int = 0


class Auditor:
    """Samples every table version and every region's pending generations, directly (not via the proxy)."""

    def __init__(self, target: str, table: MemWalTable, grace_seconds: float) -> None:
        self.target = target
        self.table = table
        self.grace = grace_seconds
        self.last_version = 0
        self.best: dict[str, tuple[int, int]] = {}  # region -> (highest progress seen, at version)
        self.stats = AuditStats()
        self.violations: list[Violation] = []

    def poll(self) -> None:
        """Audit every version committed since the last poll, then the pending generations."""
        latest = int(self.table.dataset().version)
        for version in range(self.last_version + 1, latest + 1):
            try:
                merged = self.table.index_details(version).merged
            except NotFoundError:  # retention removed it before we looked
                self.stats.versions_unsampled += 1
                continue
            except MemWalNotEnabledError:  # written before MemWAL was enabled
                continue
            self.stats.versions_audited += 1
            for region, (generation, seen_at) in self.best.items():
                if merged.get(region, 0) < generation:
                    self.violations.append(
                        Violation(
                            self.target,
                            "merge_progress_decreased",
                            version,
                            region,
                            merged.get(region, 0),
                            f"progress {generation} at version {seen_at}, {merged.get(region, 0)} at {version}",
                        )
                    )
            for region, generation in merged.items():
                if generation > self.best.get(region, (0, 0))[0]:
                    self.best[region] = (generation, version)
        self.last_version = max(self.last_version, latest)
        self._check_pending(latest)

    def _check_pending(self, version: int) -> None:
        """Every generation listed and not merged at `version` must still have its directory.

        GC deletes a directory only a grace period after a manifest stopped
        listing it, so a listing read less than `grace` ago proves the directory
        must exist; a slower check is skipped, not failed.
        """
        merged = dict(self.table.index_details(version).merged)
        for region, manifest in self.table.read_regions().items():
            if manifest is None:
                continue
            read_at = time.monotonic()
            pending = [g for g in manifest.generations if g.generation > merged.get(region, 0)]
            self.stats.max_merge_lag = max(self.stats.max_merge_lag, len(pending))
            if not pending:
                continue
            present = set(self.table.store.list_dirs(f"{MEM_WAL_DIR}/{region}"))
            if time.monotonic() - read_at >= self.grace:
                self.stats.inconclusive_reads += 1
                continue
            self.violations += [
                Violation(
                    self.target,
                    "pending_generation_missing",
                    version,
                    region,
                    g.generation,
                    f"listed in region manifest v{manifest.version} as {g.path}, merged through "
                    f"{merged.get(region, 0)}, directory missing",
                )
                for g in pending
                if g.path not in present
            ]


def writer_keys(config: SoakConfig) -> list[list[int]]:
    """Each writer's keys: a range per writer, or (bucketed) keys of the buckets it owns (bucket % writers).

    Buckets are computed by the same routing the writer uses, on a spec of R
    buckets over `id`; `Target.create_table` checks them against the table's own.
    """
    count = config.keys_per_writer
    if config.regions is None:
        return [
            list(range((i + 1) * KEY_STRIDE, (i + 1) * KEY_STRIDE + count)) for i in range(config.writers)
        ]
    spec = RegionSpec(spec_id=0, field_id="0", transform="bucket", column="id", num_buckets=config.regions)
    candidates = pa.table({"id": pa.array(range(1, 1 + 4 * count * config.writers), pa.int64())})
    buckets, _ = spec.route(candidates)
    keys: list[list[int]] = [[] for _ in range(config.writers)]
    for key, bucket in zip(candidates.column("id").to_pylist(), buckets.tolist(), strict=True):
        mine = keys[bucket % config.writers]
        if len(mine) < count:
            mine.append(key)
    return keys


class Target:
    """One table under test with its writers, service loops and auditor."""

    def __init__(
        self,
        name: str,
        uri: str,
        client_options: dict[str, str],
        audit_options: dict[str, str],
        config: SoakConfig,
        workdir: Path,
        *,
        spark: bool,
        services: Sequence[str] = SERVICES,
    ) -> None:
        """`spark`: whether a Spark-engine merger runs on this table too; `services`: the service loops
        (none where a deployment runs the services, bench/chaos.py)."""
        self.name = name
        self.uri = uri
        self.config = config
        self.dir = workdir / name
        self.control = self.dir / "control"
        self.control.mkdir(parents=True)
        self.audit_options = audit_options
        self.keys = writer_keys(config)
        # Filled in by `create_table`: each writer's regions, and each key's region.
        self.plans: list[WriterPlan] = []
        self.region_of: dict[int, str] = {}
        self.two_step_kills = 0
        self.table = MemWalTable(uri, audit_options)
        self.auditor = Auditor(name, self.table, config.grace_seconds)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        env.update({OPTIONS_ENV: json.dumps(client_options), "LANCE_LOG": "error", "PYTHONPATH": str(ROOT)})
        # Spark cuts each region's prefix into key partitions of at least this many rows: a few per region.
        env.setdefault(ROWS_PER_TASK_ENV, "20")
        self.env = env
        self.starts: Counter[int] = Counter()  # process starts per writer, for their sequence numbers
        self.stalls = 0
        self.children = [self._writer(i) for i in range(config.writers)]
        self.service_names = [*services, *(["merge-spark"] if spark else [])]
        self.children += [self._service(service, env) for service in self.service_names]

    def _service(self, label: str, env: dict[str, str]) -> Child:
        spark = label == "merge-spark"
        argv = [
            "service",
            "merge" if spark else label,
            f"--uri={self.uri}",
            f"--control={self.control}",
            f"--label={label}",
            f"--interval={self.config.spark_every_seconds if spark else self.config.service_interval}",
            f"--grace-seconds={self.config.grace_seconds}",
            f"--retain-seconds={self.config.retain_seconds}",
            f"--engine={'spark' if spark else 'local'}",
        ]
        return Child(
            self.name, f"svc-{label}", argv, env, self.dir, killable=not spark or self.config.spark_killable
        )

    def _writer(self, i: int, *, replacement: bool = False) -> Child:
        """Writer `i`'s process; a replacement for a stalled one claims all its regions before writing."""
        argv = [
            "writer",
            f"--uri={self.uri}",
            f"--plan={self.dir / f'writer-{i}.plan.json'}",
            f"--writer={i}",
            f"--log={self.dir / f'writer-{i}.log'}",
            f"--control={self.control}",
            f"--seed={self.config.seed * 100 + i}",
            f"--memtable-rows={self.config.memtable_rows}",
            f"--interval={self.config.writer_interval}",
            f"--sabotage-at={self.config.sabotage_at if i == 0 else 0}",
            *(["--fence-first"] if replacement else []),
        ]
        child = Child(self.name, f"writer-{i}", argv, self.env, self.dir)

        def seq_base() -> list[str]:
            self.starts[i] += 1
            return [f"--seq-base={self.starts[i] * SEQ_STRIDE}"]

        child.more_argv = seq_base
        return child

    def replace_writer(self, stalled: Child) -> Child:
        """A new process for the writer `stalled` was, started at once and listed among the writers."""
        i = int(stalled.name.removeprefix("writer-"))
        child = self._writer(i, replacement=True)
        self.children.append(child)
        child.start()
        return child

    def create_table(self) -> None:
        """The base table (half of every writer's keys), a key index the MemWAL maintains, MemWAL, the plans."""
        import lance

        rows: list[dict[str, Any]] = []
        for i, keys in enumerate(self.keys):
            rows += [{"id": k, "w": i, "v": v} for k, v in base_rows(keys).items()]
        options = self.audit_options or None
        lance.write_dataset(pa.Table.from_pylist(rows, schema=SCHEMA), self.uri, storage_options=options)
        lance.dataset(self.uri, storage_options=options).create_scalar_index("id", "BTREE", name="id_idx")
        dataset = lance.dataset(self.uri, storage_options=options)
        if self.config.regions is None:
            dataset.initialize_mem_wal()
            manual = [
                str(uuid.UUID(int=random.Random(self.config.seed * 31 + i).getrandbits(128), version=4))
                for i in range(self.config.writers)
            ]
            self.plans = [WriterPlan(keys, [manual[i]], True) for i, keys in enumerate(self.keys)]
            self.region_of = {k: manual[i] for i, keys in enumerate(self.keys) for k in keys}
        else:
            dataset.initialize_mem_wal(bucket_column="id", num_buckets=self.config.regions)
            self._bucket_plans(lance.dataset(self.uri, storage_options=options))
        for i, plan in enumerate(self.plans):
            plan.save(self.dir / f"writer-{i}.plan.json")

    def _bucket_plans(self, dataset: Any) -> None:
        """Each writer's regions as the table routes its keys; no region may serve two writers."""
        spec = region_spec_of(dataset)
        assert spec is not None
        owner: dict[str, int] = {}
        for i, keys in enumerate(self.keys):
            codes, values = spec.route(pa.table({"id": pa.array(keys, pa.int64())}))
            regions = [region_id_for(spec.spec_id, values[c]) for c in codes.tolist()]
            self.region_of.update(zip(keys, regions, strict=True))
            for region in regions:
                if owner.setdefault(region, i) != i:
                    raise RuntimeError(f"region {region} routes keys of writers {owner[region]} and {i}")
            self.plans.append(WriterPlan(keys, sorted(set(regions)), False))

    def logs(self) -> list[WriterLog]:
        return [
            parse_log(self.dir / f"writer-{i}.log", i, base_rows(keys), keys)
            for i, keys in enumerate(self.keys)
        ]

    def region_of_key(self, key: int) -> str | None:
        return self.region_of.get(key)

    def writers(self) -> list[Child]:
        """The running writer processes (not a stalled or retired stale one)."""
        return [c for c in self.children if c.is_writer and not c.retired and c.stalled is None]

    def stalled_writers(self) -> list[Child]:
        return [c for c in self.children if c.stalled is not None]

    def services(self) -> list[Child]:
        return [c for c in self.children if not c.is_writer]

    def mergers(self) -> list[Child]:
        return [c for c in self.children if c.name.startswith("svc-merge")]

    def service_runs(self, name: str) -> int:
        """How many runs of a service loop have succeeded so far."""
        return sum(1 for r in self.service_records(name) if r.get("ok"))

    def stale_writes(self) -> tuple[int, int]:
        """Puts stale writers tried and of them acknowledged, from the writers' logs (stall keys only)."""
        tried = acked = 0
        for i, keys in enumerate(self.keys):
            stall = {str(k) for k in stall_keys(keys)}
            path = self.dir / f"writer-{i}.log"
            parts = [line.split(" ") for line in path.read_text().split("\n")[:-1]] if path.exists() else []
            ops = {p[1] for p in parts if p[0] == "A" and len(p) == 4 and p[3] in stall}
            tried += len(ops)
            acked += len({p[1] for p in parts if p[0] == "K" and p[1] in ops})
        return tried, acked

    def service_records(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / f"svc-{name}.out"
        records = []
        for line in path.read_text().splitlines() if path.exists() else []:
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
        return records

    def mismatch_violations(self, mismatches: list[Mismatch], version: int, what: str) -> list[Violation]:
        """Evidence for each mismatching key: the table version, its region and that region's state (its
        merge progress at that version unless retention has removed the version since: None then)."""
        try:
            details = self.table.index_details(version)
        except NotFoundError:
            details = None
        manifests = self.table.read_regions()
        out = []
        for m in mismatches[:20]:
            region = self.region_of_key(m.key)
            manifest = manifests.get(region) if region else None
            listed = manifest.generation_numbers if manifest else []
            merged = details.merged_generation(region) if region and details is not None else None
            out.append(
                Violation(
                    self.name,
                    what,
                    version,
                    region,
                    merged,
                    json.dumps({**m.to_json(), "merged_generation": merged, "listed_generations": listed}),
                )
            )
        if len(mismatches) > 20:
            out.append(Violation(self.name, what, version, None, None, f"{len(mismatches) - 20} more keys"))
        return out


T = TypeVar("T")
# How long a quiescent check waits for storage it cannot reach (chaos's outages last up to 2 minutes).
UNREACHABLE_WAIT = 300.0
UNREACHABLE_RETRY_SECONDS = 5.0


def when_reachable(read: Callable[[], T], deadline: float, pause: float = UNREACHABLE_RETRY_SECONDS) -> T:
    """`read()`, tried again every `pause` seconds while it fails because storage cannot be reached (an
    outage says nothing of the data), until `deadline` (monotonic): then its StorageError propagates."""
    while True:
        try:
            return read()
        except StorageError:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)


def keep_table(target: Target, version: int) -> Path:
    """Copy `target`'s table, every object of it, beside its logs while the writers are still paused: the
    evidence a failed check leaves (a server's data goes with the run)."""
    store = target.table.store
    kept = target.dir / f"table-at-v{version}"
    for info in store.list_files("", recursive=True):
        path = kept / info.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(NotFoundError):  # GC may delete meanwhile
            path.write_bytes(store.read(info.path))
    return kept


def lsm_rows(table: MemWalTable) -> tuple[int, dict[int, str]]:
    """The MemWAL-aware read of the latest version: key -> value."""
    from memwal_core.services.reader import lsm_scanner, plan_read

    plan = plan_read(table)
    rows = lsm_scanner(table, plan).project(["id", "v"]).to_table()
    return plan.table_version, dict(
        zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True)
    )


class Soak:
    """Runs the targets, the kills and the audits; collects the summary."""

    def __init__(self, config: SoakConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.rng = random.Random(config.seed)
        self.servers: list[Any] = []
        self.proxies: list[FaultProxy] = []
        self.targets: list[Target] = []
        self.violations: list[Violation] = []
        self.notes: list[str] = []
        self.drain: dict[str, Counter[str]] = {}
        self.lost: dict[str, int] = {}  # keys whose final row breaks the model, per table

    def note(self, text: str) -> None:
        """Keep a note once (a repeated failure would flood the summary)."""
        if text not in self.notes:
            self.notes.append(text)

    # -- set-up and tear-down -------------------------------------------------------------------

    def setup(self) -> None:
        # One Spark merger (a JVM) per soak, on the first table: occasional Spark-engine rounds in the mix.
        spark = bool(self.config.spark_every_seconds)
        for name in ("s3", "azure"):
            if name in self.config.targets:
                self._cloud_target(name, spark=spark and not self.targets)
        if "local" in self.config.targets:
            uri = str(self.workdir / "local-table")
            spark = spark and not self.targets
            self.targets.append(Target("local", uri, {}, {}, self.config, self.workdir, spark=spark))
        for target in self.targets:
            target.create_table()

    def _cloud_target(self, name: str, *, spark: bool) -> None:
        """A table on a server started here (SeaweedFS or Azurite), its clients reaching it through a proxy."""
        server: Any
        if name == "s3":
            from tests.support.seaweed import SeaweedServer

            server = SeaweedServer(base_dir=self.workdir)
            server.create_bucket("soak")
        else:
            from tests.support.azurite import AzuriteServer

            server = AzuriteServer()
            server.create_container("soak")
        self.servers.append(server)
        proxy = FaultProxy(server.port, self.config.rates, seed=self.config.seed).start()
        self.proxies.append(proxy)
        direct = server.storage_options()
        proxied = retarget(direct, proxy.endpoint)
        uri = f"{server.scheme}://soak/table"
        self.targets.append(Target(name, uri, proxied, direct, self.config, self.workdir, spark=spark))

    def teardown(self) -> None:
        for target in self.targets:
            for child in target.children:
                child.terminate()
            target.table.close()
        for proxy in self.proxies:
            proxy.stop()
        for server in self.servers:
            server.stop()

    # -- the run ---------------------------------------------------------------------------------

    def children(self) -> list[Child]:
        """Every process of every table (replacements of stalled writers included)."""
        return [c for t in self.targets for c in t.children]

    def run(self) -> None:
        for child in self.children():
            child.start()
        started = time.monotonic()
        deadline = started + self.config.minutes * 60
        next_kill = started + self.rng.expovariate(1 / self.config.kill_every_seconds)
        next_quiesce = started + self.config.quiesce_every_seconds
        next_hold = started + self.config.hold_every_seconds
        stall_every = self.config.stall_every_seconds
        next_stall = started + self.rng.uniform(0.3, 1.0) * stall_every if stall_every else float("inf")
        while (now := time.monotonic()) < deadline:
            self._restart_due(self.children(), now)
            if now >= next_kill:
                self._kill_one(self.children(), now)
                next_kill = now + self.rng.expovariate(1 / self.config.kill_every_seconds)
            if now >= next_stall:
                self._stall_one()
                next_stall = now + self.rng.uniform(0.5, 1.5) * stall_every
            for target in self.targets:
                self._wake_due(target, now)
            if now >= next_hold:
                for target in self.targets:
                    (target.control / HOLD_FILE).touch()
                next_hold = now + self.config.hold_every_seconds
            if now >= next_quiesce:
                for target in self.targets:
                    self.quiescent_check(target)
                next_quiesce = time.monotonic() + self.config.quiesce_every_seconds
            for target in self.targets:
                if self._kill_held(target):
                    next_quiesce = time.monotonic() + self.config.quiesce_every_seconds
                self._audit(target)
            time.sleep(0.2)
        self.finish()

    def _take_held(self, target: Target) -> list[Child]:
        """Kill -9 every merger of `target` that stopped between a fenced delete and its upsert."""
        held = []
        for marker in target.control.glob("held-*"):
            child = next(c for c in target.mergers() if c.name == f"svc-{marker.name.removeprefix('held-')}")
            marker.unlink()
            if child.alive():
                child.kill9()
                target.two_step_kills += 1
            held.append(child)
        return held

    def _kill_held(self, target: Target) -> bool:
        """After a kill inside a two-step commit, read the table the MemWAL way with no merger running.

        The base has lost the deleted rows while merge progress has not moved:
        the pending generations' tombstones and puts must still make the read
        equal the model. The other mergers are stopped (SIGSTOP) meanwhile and
        the killed one restarts after the check. True if a check ran.
        """
        held = self._take_held(target)
        if not held:
            return False
        for child in held:
            child.restart_at = float("inf")
        stopped = [c for c in target.mergers() if c.alive()]
        for child in stopped:
            assert child.process is not None
            os.kill(child.process.pid, signal.SIGSTOP)
        try:
            self.quiescent_check(target)
            target.auditor.stats.checks_after_two_step_kill += 1
        finally:
            for child in stopped:
                assert child.process is not None
                os.kill(child.process.pid, signal.SIGCONT)
            for child in held:
                child.restart_at = time.monotonic()
        return True

    def _audit(self, target: Target) -> None:
        try:
            target.auditor.poll()
        except Exception as exc:  # the audit reads directly, but a version can vanish mid-read
            self.note(f"{target.name}: audit poll failed: {type(exc).__name__}: {str(exc)[:200]}")

    def _restart_due(self, children: list[Child], now: float) -> None:
        for child in children:
            if child.alive() or child.retired:
                continue
            if child.restart_at is None:  # exited without being killed: a crash
                child.crashes += 1
                self.note(f"{child.target}/{child.name} exited by itself: {child.stderr_tail(3)}")
                child.restart_at = now
            if now >= child.restart_at:
                child.start()

    def _kill_one(self, children: list[Child], now: float) -> None:
        alive = [c for c in children if c.alive() and c.killable and c.stalled is None]
        if alive:
            victim = self.rng.choice(alive)
            victim.kill9()
            victim.restart_at = now + self.rng.uniform(0.1, 2.0)

    def _stall_one(self) -> None:
        """Stop a random writer that holds its claim where it is (SIGSTOP) and start a replacement that fences it."""
        candidates = [
            (t, c)
            for t in self.targets
            for c in t.writers()
            if c.alive() and c.process is not None and claimed_marker(t.control, c.process.pid).exists()
        ]
        if not candidates:
            return
        target, child = self.rng.choice(candidates)
        assert child.process is not None
        os.kill(child.process.pid, signal.SIGSTOP)
        child.stalled = (time.monotonic(), target.service_runs("merge"), target.service_runs("gc"))
        target.stalls += 1
        target.replace_writer(child)

    def _wake_due(self, target: Target, now: float, *, force: bool = False) -> None:
        """Wake each stalled writer of `target` that was held across a merge and a GC, as a stale one."""
        for child in target.stalled_writers():
            assert child.stalled is not None and child.process is not None
            since, merges, gcs = child.stalled
            ran = target.service_runs("merge") > merges and target.service_runs("gc") > gcs
            held = now - since
            if (
                force
                or held >= self.config.stall_max_seconds
                or (ran and held >= self.config.stall_min_seconds)
            ):
                stale_marker(target.control, child.process.pid).touch()
                child.retired = True
                child.stalled = None
                os.kill(child.process.pid, signal.SIGCONT)

    def _pause_writers(self, target: Target, timeout: float = 45.0) -> bool:
        """Make every writer of `target` flush and wait; False if one did not answer in time.

        A stale process woken before the pause writes on (and may fence the
        live writer) until it exits: it is waited for first, so that what it
        acknowledged is flushed, or replayed by the live writer's re-claim,
        before the writers flush (seed 11's three stale puts were missed).
        """
        for child in target.writers():
            if not child.alive():
                child.start()
        deadline = time.monotonic() + timeout
        token: str | None = None
        while time.monotonic() < deadline:
            if token is None and not any(c.retired and c.alive() for c in target.children):
                token = request_pause(target.control)
            if token is not None and all_paused(target.control, self.config.writers, token):
                return True
            self._restart_due(target.writers(), time.monotonic())
            for audited in self.targets:  # retention must not remove versions unseen while we wait
                self._audit(audited)
            time.sleep(0.1)
        return False

    @contextlib.contextmanager
    def _clean_network(self) -> Iterator[None]:
        """No new faults from the proxy meanwhile (the writers' own faults were injected while they wrote)."""
        faulty = [proxy for proxy in self.proxies if proxy.faults.is_set()]
        for proxy in faulty:
            proxy.faults.clear()
        try:
            yield
        finally:
            for proxy in faulty:
                proxy.faults.set()

    def quiescent_check(self, target: Target) -> None:
        """With writers paused and flushed, the MemWAL-aware read must equal the acknowledged writes.

        On a clean network: a pause is the writers' flush of every region they
        hold, and through the proxy's faults that flush failed somewhere, was
        retried and failed again often enough that 64 regions took minutes to
        pause (and the check was skipped). Faults while writing are the soak's
        point; faults while pausing only delayed the check.
        """
        with self._clean_network():
            self._check_paused(target)

    def _check_paused(self, target: Target) -> None:
        try:
            pausing = time.monotonic()
            paused = self._pause_writers(target)
            seconds = time.monotonic() - pausing
            target.auditor.stats.seconds_to_pause += seconds
            target.auditor.stats.max_seconds_to_pause = max(
                target.auditor.stats.max_seconds_to_pause, seconds
            )
            if not paused:
                self.note(f"{target.name}: writers did not pause in time; check skipped")
                return
            for attempt in range(3):
                started = time.monotonic()
                try:
                    read = when_reachable(lambda: lsm_rows(target.table), time.monotonic() + UNREACHABLE_WAIT)
                except StorageError as exc:
                    target.auditor.stats.inconclusive_reads += 1
                    self.note(
                        f"{target.name}: check skipped, storage unreachable for {UNREACHABLE_WAIT:.0f} s: {exc}"
                    )
                    return
                except Exception as exc:
                    # A generation merged and deleted under a read slower than the grace period.
                    if time.monotonic() - started < self.config.grace_seconds and attempt == 2:
                        raise
                    target.auditor.stats.inconclusive_reads += 1
                    self.note(f"{target.name}: LSM read retried: {str(exc)[:200]}")
                    continue
                version, actual = read
                mismatches = compare(target.logs(), actual)
                target.auditor.stats.quiescent_checks += 1
                self.violations += target.mismatch_violations(mismatches, version, "lsm_read_differs")
                if mismatches:
                    self.note(
                        f"{target.name}: the table as the writers left it: {keep_table(target, version)}"
                    )
                return
        finally:
            end_pause(target.control)

    # -- the end -----------------------------------------------------------------------------------

    def finish(self) -> None:
        """Stop the load, replay what the writers left in their WALs, let the services settle, drain
        in-process, then check the end state."""
        self.stop_load()
        for target in self.targets:
            self._replay_wals(target)
            self._audit(target)
        self.settle()
        for target in self.targets:
            self.drain[target.name] = drain(target.table)
            self._audit(target)
            self.final_checks(target)

    def settle(self) -> None:
        """What runs between the replay and the drain: nothing here (the service loops have stopped)."""

    def stop_load(self) -> None:
        """Wake stalled writers, stop faults, close writers, stop the service loops."""
        for target in self.targets:
            self._wake_due(target, time.monotonic(), force=True)
        for target in self.targets:
            for child in target.children:
                if child.retired and not child.stop(STALE_EXIT_SECONDS):
                    self.note(f"{target.name}/{child.name}: a stale writer did not exit by itself")
        for proxy in self.proxies:
            proxy.faults.clear()
        for target in self.targets:  # no more holds: a merger holding now is killed like any other
            (target.control / HOLD_FILE).unlink(missing_ok=True)
            self._take_held(target)
        children = self.children()
        now = time.monotonic()
        for child in children:
            if not child.alive():
                child.restart_at = now
        self._restart_due(children, now)
        for target in self.targets:
            (target.control / "stop").touch()
        for target in self.targets:
            for child in target.writers():
                if not (child.stop(60) and child.process is not None and child.process.returncode == 0):
                    self.note(f"{target.name}/{child.name} did not close by itself")
            for child in target.services():
                # A round in progress (a slow Spark one, say) finishes on the clean network.
                if not child.stop(SERVICE_STOP_SECONDS):
                    self.note(f"{target.name}/{child.name} did not stop within {SERVICE_STOP_SECONDS} s")

    def _replay_wals(self, target: Target) -> None:
        """Claim every writer's regions once (replay, then flush) after all writers stopped.

        A writer killed after its last flush leaves acknowledged writes in its
        regions' WALs only; they become readable when a later writer claims
        the region. A restarted writer claims only the regions it writes to
        before it is stopped (none, if the stop came first), so without this
        such writes would look lost. How many acknowledged writes the
        MemWAL-aware read lacked before this replay is counted (it is not a
        loss: the final comparison after the drain decides that).
        """
        try:
            _, before = lsm_rows(target.table)
            target.auditor.stats.acked_only_in_wal_at_stop = len(compare(target.logs(), before))
        except Exception as exc:
            self.note(f"{target.name}: LSM read before the final replay failed: {str(exc)[:200]}")
        for i, plan in enumerate(target.plans):
            try:
                reclaim(target.uri, target.audit_options, plan.regions, self.config.memtable_rows)
            except Exception as exc:
                self.note(f"{target.name}/writer-{i}: final re-claim failed: {str(exc)[:300]}")
                self._unclaimable(target, plan.regions)

    def _unclaimable(self, target: Target, regions: list[str]) -> None:
        """A writer's regions could not all be re-claimed: a violation per region that still fails, with
        its WAL as evidence, then Lance's suggested way out of an over-full WAL generation (a claim with
        a larger MemTable), so that the final comparison shows whether the acknowledged writes survived."""
        for region in regions:
            try:
                reclaim(target.uri, target.audit_options, [region], self.config.memtable_rows)
                continue
            except Exception as again:
                evidence = json.dumps(wal_evidence(target.table, region, str(again)))
                self.violations.append(
                    Violation(
                        target.name,
                        "region_unclaimable",
                        None,
                        region,
                        None,
                        f"{str(again)[:400]}; evidence: {evidence}",
                    )
                )
            try:
                reclaim(target.uri, target.audit_options, [region], RECOVERY_MEMTABLE_ROWS)
                self.note(
                    f"{target.name}: region {region} claimed with max_memtable_rows={RECOVERY_MEMTABLE_ROWS}"
                )
            except Exception as last:
                self.note(f"{target.name}: region {region} not recoverable either: {str(last)[:300]}")

    def final_checks(self, target: Target) -> None:
        table = target.table
        version = int(table.dataset().version)
        rows = table.dataset(version).to_table(columns=["id", "v"])
        actual = dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True))
        if len(actual) != rows.num_rows:
            self.violations.append(
                Violation(target.name, "duplicate_keys", version, None, None, f"{rows.num_rows} rows")
            )
        lost = compare(target.logs(), actual)
        self.lost[target.name] = len(lost)
        self.violations += target.mismatch_violations(lost, version, "base_differs")
        merged = table.index_details(version).merged
        from memwal_core.services.gc.service import gc

        report = gc(table, dry_run=True, policy=final_gc_policy()).to_json()
        kept = {(k["region"], k["path"]): k["reason"] for k in report["kept"]}
        for region, manifest in table.read_regions().items():
            if manifest is None:
                continue
            left = [g.generation for g in manifest.generations]
            if left or manifest.current_generation - 1 > merged.get(region, 0):
                self.violations.append(
                    Violation(
                        target.name,
                        "pending_after_drain",
                        version,
                        region,
                        merged.get(region, 0),
                        f"listed {left}, current generation {manifest.current_generation}",
                    )
                )
            self.violations += leftovers(
                target.name, table, version, region, manifest.replay_after_wal_entry_position, kept
            )

    # -- the summary -------------------------------------------------------------------------------

    def summary(self, seconds: float) -> dict[str, Any]:
        per_target = {}
        for target in self.targets:
            logs = target.logs()
            merges = [
                r for name in ("merge", "merge-spark") for r in target.service_records(name) if r.get("ok")
            ]
            gcs = [r for r in target.service_records("gc") if r.get("ok")]
            failed_runs = Counter(
                name for name in target.service_names for r in target.service_records(name) if not r.get("ok")
            )
            drained = self.drain.get(target.name, Counter())
            # Batches (commits) by engine and commit form, the drain's included.
            by_form = Counter({k: n for k, n in drained.items() if "/" in k})
            for record in merges:
                by_form.update(
                    {f"{record['engine']}/{form}": n for form, n in record.get("forms", {}).items()}
                )
            stats = target.auditor.stats
            stale_tried, stale_acked = target.stale_writes()
            per_target[target.name] = {
                "writes_acknowledged": sum(w.acked_ops for w in logs),
                "rows_acknowledged": sum(w.acked_rows for w in logs),
                "writes_unacknowledged": sum(w.failed_ops for w in logs),
                "writes_lost": self.lost.get(target.name, 0),
                "kills_writers": sum(c.kills for c in target.children if c.is_writer),
                "kills_services": sum(c.kills for c in target.services()),
                "kills_in_two_step_commit": target.two_step_kills,
                "writer_stalls": target.stalls,
                "stale_writes": stale_tried,
                "stale_writes_acknowledged": stale_acked,
                "crashes": sum(c.crashes for c in target.children),
                "merges": sum(r.get("commits", 0) for r in merges) + drained["commits"],
                "generations_merged": sum(r.get("merged", 0) for r in merges) + drained["merged"],
                "merge_batches": sum(by_form.values()),
                "merge_batches_by_engine_and_form": dict(sorted(by_form.items())),
                "spark_merge_rounds": sum(1 for r in merges if r["engine"] == "spark"),
                "gc_deleted_generations": sum(r.get("deleted", 0) for r in gcs) + drained["deleted"],
                "gc_deleted_wal_entries": sum(r.get("wal_deleted", 0) for r in gcs) + drained["wal_deleted"],
                "gc_deleted_manifests": sum(r.get("manifests_deleted", 0) for r in gcs)
                + drained["manifests_deleted"],
                "failed_service_runs": dict(failed_runs),
                "max_merge_lag_generations": stats.max_merge_lag,
                "versions_audited": stats.versions_audited,
                "versions_unsampled": stats.versions_unsampled,
                "quiescent_checks": stats.quiescent_checks,
                "checks_after_two_step_kill": stats.checks_after_two_step_kill,
                "inconclusive_reads": stats.inconclusive_reads,
                "acked_only_in_wal_at_stop": stats.acked_only_in_wal_at_stop,
                "seconds_to_pause_writers": round(stats.seconds_to_pause, 1),
                "max_seconds_to_pause_writers": round(stats.max_seconds_to_pause, 1),
            }
        totals = Counter[str]()
        by_form = Counter[str]()
        for numbers in per_target.values():
            totals.update({k: v for k, v in numbers.items() if isinstance(v, int)})
            by_form.update(numbers["merge_batches_by_engine_and_form"])
        totals["max_merge_lag_generations"] = max(
            (n["max_merge_lag_generations"] for n in per_target.values()), default=0
        )
        return {
            "seconds": round(seconds, 1),
            "minutes_of_load": self.config.minutes,
            "writers_per_table": self.config.writers,
            "regions_per_table": self.config.regions or self.config.writers,
            "memtable_rows": self.config.memtable_rows,
            "seed": self.config.seed,
            "injected_faults": dict(sum((proxy.counts for proxy in self.proxies), Counter())),
            "totals": {**totals, "merge_batches_by_engine_and_form": dict(sorted(by_form.items()))},
            "tables": per_target,
            "violations": [v.to_json() for v in self.violations],
            "notes": self.notes[-30:],
        }


def drain(table: MemWalTable) -> Counter[str]:
    """Merge until nothing is pending, catch indexes up, snapshot, drop old versions, GC with no grace."""
    from memwal_core.services.catchup import catchup
    from memwal_core.services.gc.plan import plan_gc
    from memwal_core.services.gc.service import execute_gc
    from memwal_core.services.merge.service import merge
    from memwal_core.services.reader import plan_read
    from memwal_core.services.retain import retain
    from memwal_core.services.snapshot.service import build_snapshot

    counts: Counter[str] = Counter()
    for _round in range(20):
        result = merge(table)
        counts["commits"] += len(result.regions)
        counts["merged"] += sum(len(r.merged_generations) for r in result.regions)
        counts.update(f"local/{b.commit_form}" for b in result.batches)
        if not any(r.generations for r in plan_read(table).regions) and not result.busy_regions:
            break
        time.sleep(0.5)
    catchup(table)
    build_snapshot(table)
    retain(table, older_than=timedelta(0), keep_versions=1, force=True)
    policy = final_gc_policy()
    # A run that prunes writes one more manifest version; the next run trims it. Every writer has
    # stopped, so GC may plan as if the fence retention had passed.
    for _run in range(3):
        later = time.time() + policy.fence_retention_seconds + 60
        report = execute_gc(table, plan_gc(table, policy, now=later), dry_run=False).to_json()
        counts["deleted"] += len(report["deleted"])
        counts["wal_deleted"] += report["wal_entries"]["deleted"]
        counts["manifests_deleted"] += report["manifest_versions_deleted"]
        if not report["objects_deleted"] and not report["pruned"]:
            break
    return counts


def final_gc_policy() -> Any:
    """GC after the drain: no grace; the manifest count as checked below."""
    from memwal_core.services.gc.rules import GcPolicy

    return GcPolicy(grace_seconds=0, keep_manifest_versions=FINAL_KEEP_MANIFESTS)


def leftovers(
    target: str,
    table: MemWalTable,
    version: int,
    region: str,
    covered_through: int,
    kept: dict[tuple[str, str], str],
) -> list[Violation]:
    """What GC must not leave: generation directories, surplus manifest versions, covered WAL entries.

    `kept`: the reason a dry GC run gives for keeping a directory, as evidence.
    """
    out = []
    region_dir = f"{MEM_WAL_DIR}/{region}"
    for name in table.store.list_dirs(region_dir):
        generation = generation_from_dir_name(name)
        if generation is not None:
            files = [
                f.path.split(name, 1)[-1]
                for f in table.store.list_files(f"{region_dir}/{name}", recursive=True)
            ]
            if not files:  # SeaweedFS lists a folder whose objects are all deleted: nothing is left
                continue
            detail = f"{name}: gc says {kept.get((region, name), 'nothing')}; {len(files)} files {files[:6]}"
            out.append(Violation(target, "generation_left_after_gc", version, region, generation, detail))
    manifests = len(table.region_store(region).stored_versions())
    if manifests > FINAL_KEEP_MANIFESTS:
        out.append(
            Violation(target, "manifests_left_after_gc", version, region, None, f"{manifests} versions")
        )
    names = wal_positions(table, region)
    covered = sorted(p for p in names if p <= covered_through)
    if covered:
        out.append(
            Violation(
                target,
                "wal_left_after_gc",
                version,
                region,
                None,
                f"{len(covered)} covered WAL entries (first {covered[:5]}, through {covered_through}) "
                f"of {len(names)}",
            )
        )
    return out


def wal_positions(table: MemWalTable, region: str) -> dict[int, str]:
    """A region's WAL entries: position -> object path."""
    from memwal_core.format.naming import parse_bitrev64

    files = table.store.list_files(f"{MEM_WAL_DIR}/{region}/{REGION_WAL_DIR}")
    # A writer killed mid-put on local disk leaves `{name}.arrow.tmp.{uuid}`: not an entry.
    return {
        parse_bitrev64(f.path.rsplit("/", 1)[-1].removesuffix(".arrow")): f.path
        for f in files
        if f.path.endswith(".arrow")
    }


def wal_evidence(table: MemWalTable, region: str, error: str) -> dict[str, Any]:
    """A region's manifest state and the WAL entries around the position an error names (else the newest)."""
    import re

    import pyarrow as pa

    names = wal_positions(table, region)
    named = re.search(r"position (\d+)", error)
    around = int(named.group(1)) if named else max(names, default=0)
    manifest = table.region_store(region).read_latest()
    out: list[dict[str, Any]] = []
    start = max(manifest.replay_after_wal_entry_position + 1, around - 60)
    for position in [p for p in sorted(names) if start <= p <= around + 2]:
        entry: dict[str, Any] = {"position": position}
        try:
            rows = pa.ipc.open_stream(table.store.read(names[position])).read_all()
            meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
            entry.update(meta, rows=rows.num_rows)
        except Exception as exc:
            entry["error"] = str(exc)[:100]
        out.append(entry)
    return {
        "manifest_version": manifest.version,
        "writer_epoch": manifest.writer_epoch,
        "replay_after_wal_entry_position": manifest.replay_after_wal_entry_position,
        "current_generation": manifest.current_generation,
        "wal_positions": [min(names, default=0), max(names, default=0)],
        # Unflushed rows per generation and epoch: more than the MemTable holds is what replay refuses.
        "rows_by_generation_and_epoch": dict(
            Counter(
                f"g{e.get('generation')}@e{e.get('writer_epoch')}"
                for e in out
                for _ in range(e.get("rows", 0))
            )
        ),
        "entries": out,
    }


def format_summary(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    faults = summary["injected_faults"]
    injected = sum(n for k, n in faults.items() if k != "connections")
    lines = [
        f"soak: {summary['minutes_of_load']} min of load, {summary['writers_per_table']} writers and "
        f"{summary['regions_per_table']} regions per table (MemTables of {summary['memtable_rows']} rows), "
        f"seed {summary['seed']}, {summary['seconds']} s in all",
        f"  writes acknowledged {t.get('writes_acknowledged', 0)} ({t.get('rows_acknowledged', 0)} rows), "
        f"writes lost {t.get('writes_lost', 0)}, unacknowledged (failed or killed) {t.get('writes_unacknowledged', 0)}",
        f"  kills {t.get('kills_writers', 0) + t.get('kills_services', 0)} "
        f"(writers {t.get('kills_writers', 0)}, services {t.get('kills_services', 0)}, "
        f"of them inside a two-step commit {t.get('kills_in_two_step_commit', 0)}), "
        f"injected network faults {injected} {dict(sorted(faults.items()))}",
        f"  writers stalled {t.get('writer_stalls', 0)} (held across merges and GCs, then woken): "
        f"{t.get('stale_writes', 0)} puts tried by stale writers, {t.get('stale_writes_acknowledged', 0)} "
        "acknowledged (each must be read)",
        f"  merges {t.get('merges', 0)} region merges ({t.get('generations_merged', 0)} generations) in "
        f"{t.get('merge_batches', 0)} commits by engine/form {t['merge_batches_by_engine_and_form']}, "
        f"{t.get('spark_merge_rounds', 0)} Spark rounds",
        f"  generations GC'd {t.get('gc_deleted_generations', 0)}; GC deletions "
        f"{t.get('gc_deleted_generations', 0)} generations, {t.get('gc_deleted_wal_entries', 0)} WAL entries, "
        f"{t.get('gc_deleted_manifests', 0)} manifest versions",
        f"  max merge lag {t.get('max_merge_lag_generations', 0)} generations; versions audited "
        f"{t.get('versions_audited', 0)} (unsampled {t.get('versions_unsampled', 0)}), quiescent checks "
        f"{t.get('quiescent_checks', 0)} ({t.get('checks_after_two_step_kill', 0)} right after a two-step kill), "
        f"crashes {t.get('crashes', 0)}; acknowledged keys only in a WAL when the writers stopped "
        f"{t.get('acked_only_in_wal_at_stop', 0)} (replayed by the final re-claim)",
    ]
    for name, numbers in summary["tables"].items():
        lines.append(
            f"  [{name}] acked {numbers['writes_acknowledged']}, lost {numbers['writes_lost']}, "
            f"kills {numbers['kills_writers']}+{numbers['kills_services']}, merges {numbers['merges']}, "
            f"gc gens {numbers['gc_deleted_generations']}, lag {numbers['max_merge_lag_generations']}, "
            f"failed runs {numbers['failed_service_runs']}, {numbers['seconds_to_pause_writers']} s pausing "
            f"writers (at most {numbers['max_seconds_to_pause_writers']} s at once)"
        )
    violations = summary["violations"]
    lines.append(f"  RESULT: {'FAIL' if violations else 'PASS'} ({len(violations)} violations)")
    lines += [
        f"    {v['target']} {v['kind']} table v{v['table_version']} region {v['region']} "
        f"generation {v['generation']}: {v['detail']}"
        for v in violations[:25]
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> tuple[SoakConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="the CI mode: about 70 s of load")
    mode.add_argument("--minutes", type=float, help="minutes of load (long mode)")
    parser.add_argument("--writers", type=int, help="writer processes per table")
    parser.add_argument(
        "--regions", type=int, help="bucket each table into this many regions, spread over the writers"
    )
    parser.add_argument("--memtable-rows", type=int, help="each writer's MemTable row limit per region")
    parser.add_argument(
        "--spark-every", type=float, help="seconds between Spark-engine merge rounds (0: none)"
    )
    parser.add_argument(
        "--sabotage-at",
        type=int,
        help="writer 0 logs one put from this op on as acknowledged without writing it (the run must fail)",
    )
    parser.add_argument("--seed", type=int)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--azure", action="store_true", help="also a table on Azurite")
    parser.add_argument(
        "--workdir", help="keep logs and tables here (default: a temp dir, removed on success)"
    )
    parser.add_argument("--json", help="also write the summary as JSON to this file")
    args = parser.parse_args(argv)
    config = SHORT if args.short else SoakConfig(minutes=args.minutes)
    if args.writers:
        config = replace(config, writers=args.writers)
    if args.regions is not None:
        if args.regions < config.writers:
            parser.error(f"--regions {args.regions}: at least one region per writer ({config.writers})")
        # A region sees a share of its writer's rows: a smaller MemTable still seals generations often.
        config = replace(config, regions=args.regions, memtable_rows=WIDE_MEMTABLE_ROWS)
    if args.memtable_rows is not None:
        if args.memtable_rows < 1:
            parser.error(f"--memtable-rows {args.memtable_rows}: at least 1")
        config = replace(config, memtable_rows=args.memtable_rows)
    if args.spark_every is not None:
        if args.spark_every < 0:
            parser.error(f"--spark-every {args.spark_every}: not a number of seconds")
        config = replace(config, spark_every_seconds=args.spark_every)
    if args.sabotage_at:
        config = replace(config, sabotage_at=args.sabotage_at)
    if args.seed is not None:
        config = replace(config, seed=args.seed)
    wanted = (*config.targets, "azure") if args.azure else config.targets
    targets = tuple(t for t in wanted if not getattr(args, f"skip_{t}", False))
    return replace(config, targets=targets), args


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    os.environ.setdefault("LANCE_LOG", "error")
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="memwal-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    soak = Soak(config, workdir)
    try:
        soak.setup()
        soak.run()
    finally:
        soak.teardown()
    summary = soak.summary(time.monotonic() - started)
    return report(summary, format_summary(summary), args, workdir)


def report(summary: dict[str, Any], text: str, args: argparse.Namespace, workdir: Path) -> int:
    """Print a run's summary (text, then JSON), write it to `--json`, keep the workdir when something
    failed or it was asked for; the exit status: 1 when the summary lists a violation."""
    print(text)
    print(json.dumps(summary, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    failed = bool(summary["violations"])
    if failed or args.workdir:
        print(f"logs and tables kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
