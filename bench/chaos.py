"""Chaos: the deployment of docs/deploy/ under kills, stalls, outages, schema changes and clock steps.

What users deploy runs for real on 127.0.0.1: the code server, the Dagster daemon and webserver
(the commands of the units in docs/deploy/, tests/support/dagster.py), PostgreSQL as Dagster's
instance (docs/deploy/dagster-postgres.yaml), a warm Spark Connect server with a Spark threshold low
enough that the bigger merge rounds go to Spark, `memwal metrics --listen` scraped every second by a
real Prometheus evaluating the shipped alert rules, and SeaweedFS holding `--tables` tables behind
the soak's fault proxy (delays, resets, dropped connections). Every sensor and every schedule is on
(the schedules compressed: CRONS). The soak's writers (bench/soak.py) write each table durably, and
its model of acknowledged writes and its auditor judge the result.

Then, one at a time at random (seeded) moments, a fault of FAULTS: kill -9 of the daemon (its whole
tree, or the daemon alone), the code server (alone, its runs SIGTERMed by its unit, or with them, as an
OOM kill or a lost host does), a run worker, the webserver, the Connect server,
PostgreSQL, the exporter, Prometheus or SeaweedFS itself (a storage outage of `--outage` seconds);
SIGSTOP of the code server; a schema change (a nullable column added, an added column renamed); a
clock step (the daemon or the code server restarted under libfaketime's FAKETIME, then again
without). A killed part is restarted as its systemd unit would: the rest of the unit SIGTERMed at
once, the main process started again RESTART_SECONDS later. Beside them, as in the soak, writers are
killed and stopped (SIGSTOP, replaced, woken as stale writers that must be refused or read).

Checked while it runs and at the end:
- every acknowledged write is in the MemWAL-aware read (quiescent checks) and, once the deployment
  has merged everything, in the base; merge progress never goes down; no pending generation's
  directory goes missing (the soak's auditor and end checks);
- after each fault the pipeline resumes by itself: the time from the part's recovery to the next
  merge commit, by fault kind; no table stays behind past `--lag-bound`; after the last fault the
  deployment merges the whole backlog within `--settle-seconds`;
- the alerts: MemwalTableBehind fires while a table is behind its threshold (read directly from
  storage), MemwalTableUnreadable while storage is down longer than its `for:`, and every alert
  clears once the tables are merged;
- no run stays STARTED past its bound (its `dagster/max_runtime` or the instance's, plus run
  monitoring's poll); a STARTED run whose worker is gone and that has no bound is stuck for good;
- memory and open files of the long-lived processes stay flat: a fitted slope over each process's
  life, judged once it lived `--leak-minutes`.

Usage:
    python bench/chaos.py --short                           # CI: under 3 minutes, no Spark
    python bench/chaos.py --minutes 10 --seed 3             # a short seeded run
    python bench/chaos.py --minutes 120 --seed 1 --chart docs/images/chaos-memory.svg
Exit status 0: nothing lost, no invariant broken; 1: the summary lists the evidence.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from memwal_core.connect_server import ConnectServer
    from tests.support.dagster import DagsterDeployment
    from tests.support.postgres import PostgresServer
    from tests.support.prometheus import Exporter, PrometheusServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chart import line_chart  # noqa: E402
from bench.soak import Soak, SoakConfig, Target, Violation, format_summary, report  # noqa: E402
from memwal_core.model.table import MemWalTable  # noqa: E402

BUCKET = "chaos"
OPTIONS_ENV = "CHAOS_STORAGE_OPTIONS"
# RestartSec= of every unit in docs/deploy/.
RESTART_SECONDS = 5.0
# How long `systemctl stop` waits before SIGKILL (TimeoutStopSec=, 90 s by default, shortened: the code
# server waits for its runs to end).
STOP_SECONDS = 10.0
# Restarts of a unit tried before its failure counts as a violation (systemd would go on trying).
RESTART_TRIES = 3
FAULTS = (
    "daemon_tree",
    "daemon",
    "code_server",
    "code_server_tree",
    "run_worker",
    "webserver",
    "connect",
    "postgres",
    "exporter",
    "prometheus",
    "storage",
    "code_server_stop",
    "schema_add",
    "schema_rename",
    "clock_step",
)
# The parts each kind of fault acts on (the units of docs/deploy/ and SeaweedFS, "storage"): while the
# bench's own fault holds a part, the supervisor leaves it alone, and the other way round.
FAULT_PARTS: dict[str, tuple[str, ...]] = {
    "daemon_tree": ("daemon",),
    "daemon": ("daemon",),
    "code_server": ("code_server",),
    "code_server_tree": ("code_server",),
    "code_server_stop": ("code_server",),
    "webserver": ("webserver",),
    "connect": ("connect",),
    "postgres": ("postgres",),
    "exporter": ("exporter",),
    "prometheus": ("prometheus",),
    "storage": ("storage",),
    "clock_step": ("daemon", "code_server"),
}
# How often the supervisor looks for a part that died other than by the bench's faults (a kill by hand).
SUPERVISE_SECONDS = 1.0
BY_HAND = "died, not by the bench: restarted as its unit would"
# The scheduled jobs and their compressed crons (every 15 minutes to daily by default): each runs many
# times in an hour, and with three tables they leave the run queue room for the merges on two cores.
CRONS = {
    "snapshot": ("snapshot_cron", "*/3 * * * *"),
    "gc": ("gc_cron", "*/5 * * * *"),
    "checks": ("checks_cron", "*/5 * * * *"),
    "compaction": ("compaction_cron", "*/20 * * * *"),
    "retention": ("retention_cron", "*/20 * * * *"),
}
# The deployed instance's run monitoring (docs/deploy/dagster-postgres.yaml): how often it looks, and how
# long a run may stay STARTING (a worker killed before its run started holds the run's slots till then).
MONITORING = yaml.safe_load((ROOT / "docs" / "deploy" / "dagster-postgres.yaml").read_text())[
    "run_monitoring"
]
MONITOR_POLL_SECONDS = float(MONITORING["poll_interval_seconds"])
START_TIMEOUT_SECONDS = float(MONITORING["start_timeout_seconds"])
# Slack on every bound the deployment states (a loaded 2-core machine).
SLACK_SECONDS = 60.0
# Processes that stand in for what a deployment buys (SeaweedFS for S3): their memory is reported, not
# judged (the 2-hour run's SeaweedFS grew 383 -> 643 MiB over 69 minutes of writes).
STAND_INS = frozenset({"SeaweedFS"})
# Faults during which run monitoring cannot act (`Chaos._blinded`).
BLINDING = frozenset(
    {"daemon", "daemon_tree", "code_server", "code_server_tree", "code_server_stop", "postgres", "clock_step"}
)
# Faults during which no merge can land: those, storage down, the Connect server down (a round on
# Spark fails), and a stepped clock (memwal refuses to take leases; docs/operations.md#clocks).
STOPPING_MERGES = BLINDING | {"storage", "connect"}
FAKETIME_LIBRARY = "/usr/lib/*/faketime/libfaketimeMT.so.1"


@dataclass(frozen=True)
class ChaosConfig:
    """How long, how big, and how often what fails."""

    minutes: float
    soak: SoakConfig
    tables: int = 3
    fault_every_seconds: float = 60.0
    outage_seconds: tuple[float, float] = (5.0, 120.0)
    stop_seconds: tuple[float, float] = (10.0, 90.0)
    step_seconds: int = 120
    step_hold_seconds: tuple[float, float] = (60.0, 180.0)
    spark: bool = True
    spark_min_rows: int = 150
    exporter_interval: float = 15.0
    # MemwalTableUnreadable's `for:` (5m shipped): outages of minutes must be able to fire it.
    unreadable_for_seconds: int = 30
    # The tables' max_pending_age_seconds (its minimum) and the exporter's --lag-threshold.
    lag_threshold: int = 60
    # Every run's dagster/max_runtime (merge_max_runtime_seconds and max_runtime_seconds).
    max_runtime: int = 300
    lag_bound: float = 600.0
    # Long enough for a run that died with the code server: its max_runtime, the monitor's poll, the
    # cancel timeout (the restarted code server does not know the run), and the round after it.
    settle_seconds: float = 660.0
    sample_seconds: float = 5.0
    leak_minutes: float = 30.0
    rss_slope_mib_per_hour: float = 50.0
    # The aim: no process's memory grows more than this over the last hour of a life that long.
    rss_growth_last_hour_pct: float = 10.0
    fds_slope_per_hour: float = 50.0
    seed: int = 1
    kinds: tuple[str, ...] = FAULTS
    # Each kind once, in a seeded order (the short mode), instead of kinds drawn at random.
    each_kind_once: bool = False


LONG_SOAK = SoakConfig(
    minutes=0,
    writers=2,
    regions=4,
    memtable_rows=40,
    kill_every_seconds=90.0,
    quiesce_every_seconds=120.0,
    grace_seconds=60.0,
    stall_every_seconds=240.0,
    spark_every_seconds=0.0,
    writer_interval=0.2,
    targets=(),
)
SHORT = ChaosConfig(
    minutes=1.25,
    soak=replace(LONG_SOAK, kill_every_seconds=30.0, quiesce_every_seconds=50.0, stall_every_seconds=40.0),
    tables=2,
    fault_every_seconds=4.0,
    outage_seconds=(4.0, 12.0),
    stop_seconds=(4.0, 10.0),
    step_seconds=60,
    step_hold_seconds=(8.0, 12.0),
    spark=False,
    exporter_interval=5.0,
    unreadable_for_seconds=5,
    max_runtime=60,
    # A run worker killed before its run started: its merge slot is freed by the start timeout, then
    # the next round merges (seed 3 drained a minute after a 150 s bound).
    settle_seconds=START_TIMEOUT_SECONDS + MONITOR_POLL_SECONDS + 90.0,
    # What fits in the CI's minute: the parts whose loss stops merges, and storage.
    kinds=("storage", "postgres", "code_server", "run_worker", "daemon_tree", "schema_add", "exporter"),
    each_kind_once=True,
)


@dataclass
class Fault:
    """One injected fault: when it began, when the part was back (restarted and answering), when it ended."""

    kind: str
    started: float
    recovered: float | None = None
    ended: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Unit:
    """One part as its systemd unit knows it: its main process while it runs, and how it starts again."""

    pid: Callable[[], int | None]
    start: Callable[[], None]
    ready: Callable[[], None] = lambda: None


@dataclass
class Sample:
    """What the monitor saw at one moment."""

    at: float
    # Table -> (pending generations, seconds the oldest has waited), read directly; None: unreadable.
    lag: dict[str, tuple[int, float] | None] = field(default_factory=dict)
    # (alert, table) firing in Prometheus; None: Prometheus did not answer.
    alerts: list[tuple[str, str]] | None = None
    # Component -> (PID, resident MiB, open files).
    usage: dict[str, tuple[int, float, int]] = field(default_factory=dict)


def usage(pid: int | None) -> tuple[int, float, int] | None:
    """A live process's PID, resident set (MiB) and open file descriptors; None when it is gone."""
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith("Z") or "VmRSS" not in fields:
        return None
    return pid, int(fields["VmRSS"].split()[0]) / 1024, fds


def run_workers(code_server: int) -> list[int]:
    """The code server's run workers: the processes it spawned (multiprocessing's spawn) to run a run."""
    from tests.support.service import descendants

    found = []
    for pid in descendants(code_server):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return 0.0
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 3600


def last_hour_growth(life: Sequence[tuple[float, float]]) -> float | None:
    """How much a process's memory grew over the last hour of its life, in percent of where that hour
    began (the fitted line's rise over it); None for a life shorter than an hour."""
    if not life or life[-1][0] - life[0][0] < 3600:
        return None
    hour = [(at, rss) for at, rss in life if at >= life[-1][0] - 3600]
    slope = slope_per_hour(hour)
    mean_at, mean_rss = statistics.fmean(at for at, _ in hour), statistics.fmean(rss for _, rss in hour)
    began = mean_rss - slope * (mean_at - hour[0][0]) / 3600
    return 100.0 * slope / began if began > 0 else None


def episodes(points: Sequence[tuple[float, bool | None]]) -> list[tuple[float, float]]:
    """(start, end) of each run of True in time-ordered (time, state) points; None (unknown) ends one.
    An episode still on at the last point ends there."""
    found: list[tuple[float, float]] = []
    start: float | None = None
    for at, state in points:
        if state and start is None:
            start = at
        elif not state and start is not None:
            found.append((start, at))
            start = None
    if start is not None:
        found.append((start, points[-1][0]))
    return found


def overlaps(span: tuple[float, float], others: Sequence[tuple[float, float]]) -> bool:
    return any(a <= span[1] and span[0] <= b for a, b in others)


def recovery_figures(
    faults: Sequence[Fault], merges: Sequence[float], end: float
) -> dict[str, dict[str, Any]]:
    """Per fault kind: how many, and the seconds from the part's recovery to the next merge commit
    (a fault the next one overtook before any merge is counted as overtaken, not measured)."""
    ordered = sorted(merges)
    by_kind: dict[str, list[float]] = {}
    counts: Counter[str] = Counter()
    overtaken: Counter[str] = Counter()
    for i, fault in enumerate(faults):
        counts[fault.kind] += 1
        if fault.recovered is None:
            continue
        following = faults[i + 1].started if i + 1 < len(faults) else end
        merged = next((m for m in ordered if m >= fault.recovered), None)
        if merged is None or merged > following:
            overtaken[fault.kind] += 1
            continue
        by_kind.setdefault(fault.kind, []).append(merged - fault.recovered)
    return {
        kind: {
            "count": counts[kind],
            "measured": len(by_kind.get(kind, [])),
            "overtaken": overtaken[kind],
            "median_s": round(statistics.median(by_kind[kind]), 1) if kind in by_kind else None,
            "max_s": round(max(by_kind[kind]), 1) if kind in by_kind else None,
        }
        for kind in sorted(counts)
    }


def compressed_rules(shipped: Path, unreadable_for: int, out: Path) -> Path:
    """The shipped alert rules with MemwalTableUnreadable's `for: 5m` shortened (nothing else changed)."""
    text = shipped.read_text()
    rule = text.index("alert: MemwalTableUnreadable")
    head, tail = text[:rule], text[rule:]
    tail, n = re.subn(r"for: 5m", f"for: {unreadable_for}s", tail, count=1)
    if n != 1:
        raise RuntimeError(f"{shipped}: MemwalTableUnreadable has no `for: 5m` to shorten")
    out.write_text(head + tail)
    return out


class Chaos(Soak):
    """The soak's writers, model and auditor, with the deployment in place of its service loops."""

    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        super().__init__(config.soak, workdir)
        self.chaos = config
        self.fault_rng = random.Random(config.seed * 7919 + 1)
        self.stack = contextlib.ExitStack()
        self.postgres: PostgresServer
        self.deployment: DagsterDeployment
        self.connect: ConnectServer | None = None
        self.exporter: Exporter
        self.prometheus: PrometheusServer
        self.faults: list[Fault] = []
        self.samples: list[Sample] = []
        self.merged_at: list[float] = []  # when the auditor saw merge progress move (any table)
        self.skipped: dict[str, str] = {}
        self.faketime = next(iter(sorted(glob.glob(FAKETIME_LIBRARY))), None)
        self.stopping = threading.Event()
        self.supervised = threading.Event()  # set when the supervisor is to stop (settle, teardown)
        self._supervisor: threading.Thread | None = None
        self.lock = threading.Lock()
        self._busy: set[str] = set()  # the parts a fault or the supervisor is acting on
        self._parts_free = threading.Condition()
        self.settled: dict[str, Any] = {}
        self.runs: dict[str, Any] = {}
        self.began = 0.0
        self._orphaned: dict[str, float] = {}  # run id -> since when the code server does not run it
        self._reported: set[str] = set()
        self._stepped = time.monotonic()

    # -- set-up and tear-down -------------------------------------------------------------------

    def setup(self) -> None:
        from bench.soak_proxy import FaultProxy
        from tests.support.seaweed import SeaweedServer

        self.server = SeaweedServer(base_dir=self.workdir)
        self.server.create_bucket(BUCKET)
        direct = self.server.storage_options()
        self.proxy = FaultProxy(self.server.ports["s3.port"], self.config.rates, seed=self.config.seed)
        self.proxy.start()
        proxied = {**direct, "aws_endpoint": self.proxy.endpoint}
        uris = [f"s3://{BUCKET}/t{i}" for i in range(self.chaos.tables)]
        for i, uri in enumerate(uris):
            target = Target(
                f"t{i}", uri, proxied, direct, self.config, self.workdir, spark=False, services=()
            )
            target.create_table()
            self.targets.append(target)
        self.step("SeaweedFS and the tables")
        self.stack.enter_context(self._services(uris, proxied))

    def step(self, what: str) -> None:
        """Print how long the set-up's last step took."""
        now = time.monotonic()
        print(f"chaos: {what} in {now - self._stepped:.0f} s", flush=True)
        self._stepped = now

    @contextlib.contextmanager
    def _services(self, uris: list[str], options: dict[str, str]) -> Iterator[None]:
        """PostgreSQL, the Connect server, the Dagster deployment, the exporter and Prometheus, started
        in that order and stopped in the reverse one."""
        from memwal_core.spark_session import REMOTE_ENV
        from memwal_pipelines.sensors import CATCHUP_SENSOR, COMPACTION_SENSOR, FLUSHED_SENSOR
        from tests.support.cli import option_flags
        from tests.support.connect import started_connect_server
        from tests.support.dagster import DEPLOY, DagsterDeployment
        from tests.support.postgres import PostgresServer
        from tests.support.prometheus import ALERT_RULES, Exporter, PrometheusServer

        with contextlib.ExitStack() as stack:
            self.postgres = stack.enter_context(PostgresServer())
            # Read by every Dagster process and by this one's reads of the instance.
            os.environ.update(self.postgres.dagster_env(self.postgres.create_database("dagster")))
            self.step("PostgreSQL")
            env = {OPTIONS_ENV: json.dumps(options)}
            if self.chaos.spark:
                self.connect = stack.enter_context(started_connect_server(self.workdir / "spark"))
                env[REMOTE_ENV] = self.connect.url
                self.step("the Spark Connect server")
            listing = self.workdir / "tables.yaml"
            listing.write_text(self._listing(uris))
            self.deployment = stack.enter_context(
                DagsterDeployment(
                    listing,
                    env=env,
                    start_timeout=600,
                    instance_yaml=DEPLOY / "dagster-postgres.yaml",
                    code_server=True,
                )
            )
            for sensor in (FLUSHED_SENSOR, CATCHUP_SENSOR, COMPACTION_SENSOR):
                self.deployment.start_sensor(sensor)
            for i in range(len(uris)):
                for job in CRONS:
                    self.deployment.start_schedule(f"t{i}_{job}_schedule")
            self.step("Dagster: code server, webserver, daemon; sensors and schedules on")
            self.exporter = stack.enter_context(
                Exporter(
                    uris,
                    *option_flags(options),
                    "--lag-threshold",
                    str(self.chaos.lag_threshold),
                    "--interval",
                    str(self.chaos.exporter_interval),
                )
            )
            rules = compressed_rules(
                ALERT_RULES, self.chaos.unreadable_for_seconds, self.workdir / "alerts.yml"
            )
            self.prometheus = stack.enter_context(PrometheusServer([self.exporter.target], [rules]))
            self.step("the exporter and Prometheus")
            yield

    def _listing(self, uris: list[str]) -> str:
        """tables.yaml: Spark from `spark_min_rows` rows (else the local engine), behind after
        `lag_threshold` s, a dead run failed after `max_runtime` s, the schedules compressed."""
        c = self.chaos
        keys = {
            "storage_options_env": OPTIONS_ENV,
            "merge_engine": "spark" if c.spark else "local",
            "spark_min_rows": c.spark_min_rows,
            "max_pending_age_seconds": c.lag_threshold,
            "merge_max_runtime_seconds": c.max_runtime,
            "max_runtime_seconds": c.max_runtime,
            "gc_grace_seconds": self.config.grace_seconds,
            "retain_older_than": "1h",
            "compaction_fragment_threshold": 8,
            **dict(CRONS.values()),
        }
        return "tables:\n" + "".join(
            f"  - {json.dumps({'name': f't{i}', 'uri': uri, **keys})}\n" for i, uri in enumerate(uris)
        )

    def teardown(self) -> None:
        self.stopping.set()
        self._stop_supervising()
        self.stack.close()
        super().teardown()

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> None:
        for child in self.children():
            child.start()
        self.began = time.time()
        monitors = [
            threading.Thread(target=self._monitor, name="chaos-monitor", daemon=True),
            threading.Thread(target=self._runs, name="chaos-runs", daemon=True),
        ]
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)
        self._supervisor.start()
        for monitor in monitors:
            monitor.start()
        faults = threading.Thread(target=self._faults, name="chaos-faults", daemon=True)
        faults.start()
        started = time.monotonic()
        deadline = started + self.chaos.minutes * 60
        next_kill = started + self.rng.expovariate(1 / self.config.kill_every_seconds)
        next_stall = started + self.rng.uniform(0.3, 1.0) * self.config.stall_every_seconds
        next_quiesce = started + self.config.quiesce_every_seconds
        while (now := time.monotonic()) < deadline:
            self._restart_due(self.children(), now)
            if now >= next_kill:
                self._kill_one(self.children(), now)
                next_kill = now + self.rng.expovariate(1 / self.config.kill_every_seconds)
            if now >= next_stall:
                self._stall_one()
                next_stall = now + self.rng.uniform(0.5, 1.5) * self.config.stall_every_seconds
            for target in self.targets:
                self._wake_due(target, now)
            if now >= next_quiesce:
                for target in self.targets:
                    self.quiescent_check(target)
                next_quiesce = time.monotonic() + self.config.quiesce_every_seconds
            for target in self.targets:
                self._audit(target)
            time.sleep(0.5)
        self.stopping.set()
        faults.join()  # the fault in progress ends with its part restarted
        self.finish()
        self.monitoring = False
        for monitor in monitors:
            monitor.join(timeout=90)

    def _audit(self, target: Target) -> None:
        """The soak's audit, noting when merge progress moved (the moments recovery is timed to)."""
        before = sum(g for g, _ in target.auditor.best.values())
        super()._audit(target)
        if sum(g for g, _ in target.auditor.best.values()) > before:
            self.merged_at.append(time.time())

    # -- faults ----------------------------------------------------------------------------------

    def _kinds(self) -> list[str]:
        kinds = [k for k in self.chaos.kinds if k != "connect" or self.connect is not None]
        if self.faketime is None and "clock_step" in kinds:
            self.skipped["clock_step"] = (
                f"libfaketime not installed ({FAKETIME_LIBRARY}: apt-get install faketime)"
            )
            kinds.remove("clock_step")
        return kinds

    def _faults(self) -> None:
        """One fault at a time until the run ends: a random gap, then the fault, its part restarted."""
        kinds = self._kinds()
        order = self.fault_rng.sample(kinds, len(kinds)) if self.chaos.each_kind_once else []
        while not self.stopping.wait(self.fault_rng.expovariate(1 / self.chaos.fault_every_seconds)):
            if self.chaos.each_kind_once and not order:
                return
            kind = order.pop(0) if order else self.fault_rng.choice(kinds)
            fault = Fault(kind, time.time())
            with self.lock:
                self.faults.append(fault)
            parts = FAULT_PARTS.get(kind, ())
            self._hold(parts)
            try:
                fault.detail = getattr(self, f"_fault_{kind}")(fault)
            except Exception as exc:
                fault.detail = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
                self._violation("deployment", "fault_not_recovered", f"{kind}: {fault.detail}")
            finally:
                self._release(parts)
            fault.ended = time.time()
            print(
                f"chaos: {kind} at +{fault.started - self.began:.0f} s ({fault.ended - fault.started:.0f} s): "
                f"{fault.detail}",
                flush=True,
            )

    def _restart(
        self, fault: Fault, start: Callable[[], None], ready: Callable[[], None] = lambda: None
    ) -> None:
        """Start a part again as its unit would (after RESTART_SECONDS, again if it fails), wait until it
        answers, and note the fault's recovery."""
        for attempt in range(RESTART_TRIES):
            time.sleep(RESTART_SECONDS)
            try:
                start()
                ready()
                break
            except Exception as exc:
                self.note(
                    f"{fault.kind}: restart {attempt + 1} failed: {type(exc).__name__}: {str(exc)[:200]}"
                )
                if attempt == RESTART_TRIES - 1:
                    raise
        fault.recovered = time.time()

    def _hold(self, parts: Sequence[str], *, wait: bool = True) -> bool:
        """Take `parts` for one actor (a fault, or the supervisor restarting one), waiting while another
        holds any of them; without `wait`, False instead of waiting."""
        with self._parts_free:
            if wait:
                self._parts_free.wait_for(lambda: not self._busy.intersection(parts))
            elif self._busy.intersection(parts):
                return False
            self._busy.update(parts)
            return True

    def _release(self, parts: Sequence[str]) -> None:
        with self._parts_free:
            self._busy.difference_update(parts)
            self._parts_free.notify_all()

    def _units(self) -> dict[str, Unit]:
        """The parts the supervisor keeps running, by the fault kind a death of each counts as."""

        def dagster(name: str, ready: Callable[[], None] = lambda: None) -> Unit:
            return Unit(
                lambda: self.deployment.pids[name] if self.deployment.alive(name) else None,
                lambda: self.deployment.restart_process(name),
                ready,
            )

        units = {
            "daemon": dagster("daemon"),
            "code_server": dagster("code_server", self._code_server_ready),
            "webserver": dagster("webserver", self._webserver_ready),
            "postgres": Unit(lambda: self.postgres.live_pid, self.postgres.restart),
            "exporter": Unit(lambda: self.exporter.live_pid, self.exporter.restart),
            "prometheus": Unit(lambda: self.prometheus.live_pid, self.prometheus.restart),
            "storage": Unit(lambda: self.server.live_pid, self.server.restart),
        }
        if (server := self.connect) is not None:
            units["connect"] = Unit(lambda: server.pid, self._start_connect)
        return units

    def _supervise(self) -> None:
        """Restart=always, as each part's unit has it: a part whose main process died other than by the
        bench's own faults (a kill by hand during the run) is started again (`_look_after`). The parts'
        PIDs are kept in `parts.json` in the run's folder, for whoever injects faults by hand."""
        units = self._units()
        rests: dict[str, list[tuple[int, str]]] = {}
        listed: dict[str, int | None] = {}
        while not self.supervised.wait(SUPERVISE_SECONDS):
            for name, unit in units.items():
                if not self._hold([name], wait=False):
                    rests.pop(name, None)  # a fault acts on it: what ran below it may be gone
                    continue
                try:
                    self._look_after(name, unit, rests)
                finally:
                    self._release([name])
            if (now_listed := {name: unit.pid() for name, unit in units.items()}) != listed:
                listed = now_listed
                (self.workdir / "parts.json").write_text(json.dumps(listed, indent=1))

    def _stop_supervising(self) -> None:
        """End the supervisor once a restart it began is done."""
        self.supervised.set()
        if self._supervisor is not None:
            self._supervisor.join()

    def _look_after(self, name: str, unit: Unit, rests: dict[str, list[tuple[int, str]]]) -> None:
        """Note what runs below a live part (`rests`: PIDs and start times); a dead one's rest of the unit
        is ended (SIGTERM, then SIGKILL) and the part started again, as a fault of its kind."""
        from tests.support.service import descendants, end_unit
        from tests.support.watchdog import started

        if (pid := unit.pid()) is not None:
            rests[name] = [(p, started(p)) for p in descendants(pid)]
            return
        fault = Fault(name, time.time(), detail=BY_HAND)
        with self.lock:
            self.faults.append(fault)
        print(f"chaos: {name} died at +{fault.started - self.began:.0f} s, not by the bench", flush=True)
        end_unit([p for p, at in rests.pop(name, []) if started(p) == at])
        try:
            self._restart(fault, unit.start, unit.ready)
        except Exception as exc:
            fault.detail = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            self._violation("deployment", "fault_not_recovered", f"{name} ({BY_HAND}): {fault.detail}")
        fault.ended = time.time()

    @staticmethod
    def _wait(what: str, probe: Callable[[], bool], timeout: float = 300.0) -> None:
        from tests.support.prometheus import wait_for

        wait_for(what, probe, timeout)

    def _code_server_ready(self) -> None:
        self.deployment.wait_for_code_server()

    def _fault_daemon_tree(self, fault: Fault) -> str:
        killed = self.deployment.kill_tree("daemon")
        self._restart(fault, lambda: self.deployment.restart_process("daemon"))
        return f"{len(killed)} processes killed"

    def _fault_code_server_tree(self, fault: Fault) -> str:
        killed = self.deployment.kill_tree("code_server")
        self._restart(fault, lambda: self.deployment.restart_process("code_server"), self._code_server_ready)
        return f"{len(killed) - 1} processes below it killed with it"

    def _fault_daemon(self, fault: Fault) -> str:
        killed = self.deployment.crash_process("daemon")
        self._restart(fault, lambda: self.deployment.restart_process("daemon"))
        return f"{len(killed)} processes signalled"

    def _fault_code_server(self, fault: Fault) -> str:
        killed = self.deployment.crash_process("code_server")
        self._restart(fault, lambda: self.deployment.restart_process("code_server"), self._code_server_ready)
        return f"{len(killed) - 1} run workers below it SIGTERMed"

    def _webserver_ready(self) -> None:
        from tests.support.dagster import location_loaded

        self._wait("the webserver loads the location", lambda: location_loaded(self.deployment.url))

    def _start_connect(self) -> None:
        from tests.support.connect import TEST_CONF, TEST_MASTER

        assert self.connect is not None
        self.connect.start(master=TEST_MASTER, conf=TEST_CONF, warm=False)

    def _fault_webserver(self, fault: Fault) -> str:
        self.deployment.crash_process("webserver")
        self._restart(fault, lambda: self.deployment.restart_process("webserver"), self._webserver_ready)
        return ""

    def _fault_run_worker(self, fault: Fault) -> str:
        deadline = time.monotonic() + 60
        while (
            not (workers := run_workers(self.deployment.pids["code_server"])) and time.monotonic() < deadline
        ):
            time.sleep(1)
        fault.recovered = time.time()
        if not workers:
            return "no run worker ran within 60 s"
        pid = self.fault_rng.choice(workers)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"worker {pid}"

    def _fault_connect(self, fault: Fault) -> str:
        from tests.support.service import crash

        server = self.connect
        assert server is not None  # the kind is drawn only with a Connect server
        killed = crash(pid) if (pid := server.pid) is not None else []
        self._restart(fault, self._start_connect)
        return f"{len(killed)} processes (the JVM and its Python workers)"

    def _fault_postgres(self, fault: Fault) -> str:
        self.postgres.crash()
        self._restart(fault, self.postgres.restart)
        return ""

    def _fault_exporter(self, fault: Fault) -> str:
        self.exporter.crash()
        self._restart(fault, self.exporter.restart)
        return ""

    def _fault_prometheus(self, fault: Fault) -> str:
        self.prometheus.crash()
        self._restart(fault, self.prometheus.restart)
        return ""

    def _fault_storage(self, fault: Fault) -> str:
        outage = self.fault_rng.uniform(*self.chaos.outage_seconds)
        self.server.crash()
        time.sleep(max(0.0, outage - RESTART_SECONDS))
        self._restart(fault, self.server.restart)
        return f"SeaweedFS down {fault.recovered - fault.started if fault.recovered else outage:.0f} s"

    def _fault_code_server_stop(self, fault: Fault) -> str:
        pid = self.deployment.pids["code_server"]
        held = self.fault_rng.uniform(*self.chaos.stop_seconds)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(held)
        finally:
            os.kill(pid, signal.SIGCONT)
        fault.recovered = time.time()
        return f"stopped {held:.0f} s"

    def _fault_schema_add(self, fault: Fault) -> str:
        return self._change_schema(fault, rename=False)

    def _fault_schema_rename(self, fault: Fault) -> str:
        return self._change_schema(fault, rename=True)

    def _change_schema(self, fault: Fault, *, rename: bool) -> str:
        """A nullable column added to a random table, or one added before renamed (the soak's own
        columns stay: its writers name them), with Lance's schema evolution, as an operator would."""
        import lance
        import pyarrow as pa

        target = self.fault_rng.choice(self.targets)
        n = len(self.faults)
        for attempt in range(5):
            try:
                dataset = lance.dataset(target.uri, storage_options=target.audit_options)
                added = [name for name in dataset.schema.names if name.startswith("extra_")]
                if rename and added:
                    renaming: Any = {"path": added[0], "name": f"renamed_{n}"}
                    dataset.alter_columns(renaming)
                    change = f"{target.name}: {added[0]} renamed renamed_{n}"
                else:
                    dataset.add_columns(pa.schema([pa.field(f"extra_{n}", pa.string())]))
                    change = f"{target.name}: nullable extra_{n} added"
                fault.recovered = time.time()
                return change
            except Exception as exc:  # a commit conflict with a merge: Lance's advice is to try again
                self.note(f"schema change {attempt + 1} failed: {str(exc)[:200]}")
                time.sleep(1)
        raise RuntimeError("the schema change failed five times")

    def _fault_clock_step(self, fault: Fault) -> str:
        """The daemon or the code server restarted with its clock stepped, held, then restarted right."""
        assert self.faketime is not None
        name = self.fault_rng.choice(["daemon", "code_server"])
        step = self.fault_rng.choice([-1, 1]) * self.chaos.step_seconds
        held = self.fault_rng.uniform(*self.chaos.step_hold_seconds)
        ready = self._code_server_ready if name == "code_server" else (lambda: None)
        self.deployment.terminate_process(name, STOP_SECONDS)
        stepped = {"LD_PRELOAD": self.faketime, "FAKETIME": f"{step:+d}s"}
        self._restart(fault, lambda: self.deployment.restart_process(name, stepped), ready)
        time.sleep(held)
        self.deployment.terminate_process(name, STOP_SECONDS)
        self.deployment.restart_process(name)
        ready()
        return f"{name} {step:+d} s for {held:.0f} s"

    # -- the monitor -----------------------------------------------------------------------------

    monitoring = True

    def _monitor(self) -> None:
        """Every `sample_seconds`: each table's lag (read directly), the alerts firing, the processes'
        memory and files, and the runs (one stuck is a violation at once)."""
        tables = {t.name: MemWalTable(t.uri, t.audit_options) for t in self.targets}
        try:
            while self.monitoring:
                sample = Sample(time.time())
                sample.usage = {
                    name: found for name, pid in self._pids().items() if (found := usage(pid)) is not None
                }
                sample.alerts = self._alerts()
                for name, table in tables.items():
                    sample.lag[name] = lag = self._lag(table, sample.at)
                    # The bound, plus the time since that generation's flush when no merge could land.
                    stopped = (
                        0.0 if lag is None else self._down_for(sample.at - lag[1], sample.at, STOPPING_MERGES)
                    )
                    if (
                        lag is not None
                        and lag[1] > self.chaos.lag_bound + stopped
                        and name not in self._reported
                    ):
                        self._reported.add(name)
                        self._violation(
                            name,
                            "behind_past_bound",
                            f"oldest pending generation {lag[1]:.0f} s old (bound {self.chaos.lag_bound:.0f} s, "
                            f"and {stopped:.0f} s when no merge could land); faults since: "
                            f"{self._faults_since(sample.at - lag[1])}",
                        )
                with self.lock:
                    self.samples.append(sample)
                time.sleep(self.chaos.sample_seconds)
        finally:
            for table in tables.values():
                table.close()

    def _pids(self) -> dict[str, int | None]:
        pids = self.deployment.pids
        return {
            "code server": pids.get("code_server"),
            "daemon": pids.get("daemon"),
            "webserver": pids.get("webserver"),
            "PostgreSQL": self.postgres.pid,
            "exporter": self.exporter.pid,
            "Prometheus": self.prometheus.pid,
            "SeaweedFS": self.server.pid,
            **({"Spark Connect": self.connect.pid} if self.connect is not None else {}),
        }

    def _alerts(self) -> list[tuple[str, str]] | None:
        try:
            return sorted((a["alertname"], a.get("table", "")) for a in self.prometheus.alerts())
        except Exception:
            return None

    @staticmethod
    def _lag(table: MemWalTable, now: float) -> tuple[int, float] | None:
        from memwal_core.services.status import status_and_backlog

        try:
            _, backlog = status_and_backlog(table)
        except Exception:
            return None
        return backlog.pending_total, max((r.oldest_pending_age(now) for r in backlog.regions), default=0.0)

    def _faults_since(self, since: float) -> str:
        return (
            ", ".join(
                f"{f.kind} at +{f.started - self.began:.0f} s" for f in self.faults if f.started >= since
            )
            or "none"
        )

    def _runs(self) -> None:
        """Every `sample_seconds`, the runs: one STARTED past its bound (its max_runtime, else the
        instance's, plus run monitoring's poll) is a violation; so is one that the code server does not
        run (its worker died with a former code server) when nothing bounds it: nothing will end it.
        Apart from the monitor: the code server's answer waits while it is stopped."""
        from dagster import DagsterInstance
        from dagster._core.instance.ref import InstanceRef

        with DagsterInstance.from_ref(InstanceRef.from_dir(str(self.deployment.home))) as instance:
            while self.monitoring:
                try:
                    self._check_runs(instance, time.time())
                except Exception as exc:  # PostgreSQL or the code server may be down: look again later
                    self.note(f"runs not checked: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                time.sleep(self.chaos.sample_seconds)

    def _blinded(self, since: float, now: float) -> float:
        """Seconds since `since` during which run monitoring could not act: the daemon, the code server
        (its termination request waits on a stopped one) or PostgreSQL down, or the daemon's clock stepped."""
        return self._down_for(since, now, BLINDING)

    def _down_for(self, since: float, now: float, kinds: frozenset[str]) -> float:
        """Seconds since `since` that faults of `kinds` lasted (faults come one at a time)."""
        return sum(
            max(0.0, min(f.ended or now, now) - max(f.started, since)) for f in self.faults if f.kind in kinds
        )

    def _check_runs(self, instance: Any, now: float) -> None:
        from dagster import DagsterRunStatus, RunsFilter
        from dagster._grpc.client import DagsterGrpcClient
        from dagster._grpc.types import GetCurrentRunsResult
        from dagster._serdes import deserialize_value

        default = float(instance.run_monitoring_max_runtime_seconds or 0)
        cancel = float(instance.run_monitoring_cancel_timeout_seconds)
        for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.CANCELING])):
            since = record.update_timestamp.timestamp()
            if (
                record.dagster_run.run_id not in self._reported
                and now - since > cancel + MONITOR_POLL_SECONDS + SLACK_SECONDS
            ):
                self._reported.add(record.dagster_run.run_id)
                self._violation(
                    "deployment",
                    "run_canceling_past_bound",
                    f"run {record.dagster_run.run_id} of "
                    f"{record.dagster_run.job_name} CANCELING since {self._at(since)} (cancel timeout {cancel:.0f} s)",
                )
        for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTING])):
            since = record.update_timestamp.timestamp()
            bound = START_TIMEOUT_SECONDS + MONITOR_POLL_SECONDS + SLACK_SECONDS + self._blinded(since, now)
            if record.dagster_run.run_id not in self._reported and now - since > bound:
                self._reported.add(record.dagster_run.run_id)
                self._violation(
                    "deployment",
                    "run_starting_past_bound",
                    f"run {record.dagster_run.run_id} of {record.dagster_run.job_name} STARTING since "
                    f"{self._at(since)} (start timeout {START_TIMEOUT_SECONDS:.0f} s)",
                )
        started_runs = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED]))
        if not started_runs:
            self._orphaned.clear()
            return
        client = DagsterGrpcClient(port=self.deployment.grpc_port, host="127.0.0.1")
        running = set(deserialize_value(client.get_current_runs(), GetCurrentRunsResult).current_runs)
        for record in started_runs:
            run = record.dagster_run
            if run.run_id in self._reported:
                continue
            started = record.start_time or now
            bound = float(run.tags.get("dagster/max_runtime", default) or 0)
            if run.run_id in running:
                self._orphaned.pop(run.run_id, None)
            else:
                self._orphaned.setdefault(run.run_id, now)
            orphaned = self._orphaned.get(run.run_id)
            evidence = (
                f"run {run.run_id} of {run.job_name} STARTED {now - started:.0f} s ago, max_runtime "
                f"{bound or 'none'}, "
                + (f"not the code server's since {self._at(orphaned)}" if orphaned else "running")
                + f"; faults since its start: {self._faults_since(started - 30)}"
            )
            if bound and now - started > bound + MONITOR_POLL_SECONDS + SLACK_SECONDS + self._blinded(
                started, now
            ):
                kind = "run_started_past_bound"
            elif not bound and orphaned and now - orphaned > MONITOR_POLL_SECONDS + SLACK_SECONDS:
                kind = "run_stuck_without_worker"
            else:
                continue
            self._reported.add(run.run_id)
            self._violation("deployment", kind, evidence)

    # -- the end ---------------------------------------------------------------------------------

    def settle(self) -> None:
        """The deployment, on a clean network now, must merge every table's backlog by itself (the
        writers have closed and their WALs are replayed) and clear every alert; then the daemon stops,
        the runs in flight end, and everything else stops."""
        began = time.time()
        deadline = time.monotonic() + self.chaos.settle_seconds
        pending: dict[str, Any] = {}
        while time.monotonic() < deadline:
            pending = {}
            for target in self.targets:
                self._audit(target)
                lag = self._lag(target.table, time.time())
                if lag is None or lag[0]:
                    pending[target.name] = lag
            if not pending:
                break
            time.sleep(2)
        self.settled["drained_after_s"] = None if pending else round(time.time() - began, 1)
        if pending:
            self._violation(
                "deployment",
                "not_drained",
                f"after {self.chaos.settle_seconds:.0f} s: {pending}; runs {self._run_counts()}",
            )
        cleared = time.time()
        limit = time.monotonic() + 3 * self.chaos.exporter_interval + SLACK_SECONDS
        while (firing := self._alerts()) and time.monotonic() < limit:
            time.sleep(1)
        self.settled["alerts_cleared_after_s"] = None if firing else round(time.time() - cleared, 1)
        if firing:
            self._violation("deployment", "alert_not_cleared", f"still firing: {firing}")
        self._collect("started_at_end", self._started_runs)
        self.monitoring = False  # without the daemon, run monitoring bounds nothing any more
        self._stop_supervising()  # from here on, parts stop because the bench stops them
        self.deployment.terminate_process("daemon")
        limit = time.monotonic() + 120
        while self._run_counts().get("STARTED") and time.monotonic() < limit:
            time.sleep(1)
        self.runs = self._run_counts()
        self._collect("merge_rounds_by_engine", self._rounds_by_engine)
        self._collect("run_failures", self._failures)
        self._collect("alerts", self.alert_checks)
        self._keep_logs()
        self.stack.close()

    def _collect(self, figure: str, collect: Callable[[], Any]) -> None:
        """One figure of the summary; one lost is noted, and the checks before and after still count."""
        try:
            self.settled[figure] = collect()
        except Exception as exc:
            self.note(f"{figure} not collected: {type(exc).__name__}: {str(exc)[:200]}")

    def _rounds_by_engine(self) -> dict[str, int]:
        """Merge rounds (runs that merged a region) by where they merged: Spark, or in the run's process
        below the threshold, from the base tables' materializations."""
        from dagster import AssetKey, DagsterInstance
        from dagster._core.instance.ref import InstanceRef

        rounds: set[tuple[str, str]] = set()
        with DagsterInstance.from_ref(InstanceRef.from_dir(str(self.deployment.home))) as instance:
            for target in self.targets:
                cursor = None
                while True:
                    page = instance.fetch_materializations(
                        AssetKey([target.name, "base_table"]), limit=10_000, cursor=cursor
                    )
                    for record in page.records:
                        metadata = (
                            record.asset_materialization.metadata if record.asset_materialization else {}
                        )
                        engine = metadata.get("engine")
                        rounds.add((record.run_id, str(getattr(engine, "value", engine))))
                    if not page.has_more:
                        break
                    cursor = page.cursor
        return dict(Counter(engine for _, engine in rounds))

    def _started_runs(self) -> list[str]:
        """The runs STARTED once the tables are merged and the alerts clear: their job, age and bound."""
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
        from dagster._core.instance.ref import InstanceRef

        with DagsterInstance.from_ref(InstanceRef.from_dir(str(self.deployment.home))) as instance:
            return [
                f"{r.dagster_run.job_name} {r.dagster_run.run_id[:8]} STARTED "
                f"{time.time() - (r.start_time or time.time()):.0f} s ago, since {self._at(r.start_time or 0)}; "
                f"max_runtime {r.dagster_run.tags.get('dagster/max_runtime', 'none')}"
                for r in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED]))
            ]

    def _failures(self) -> dict[str, int]:
        """Failed runs by job and first line of their error (ids and numbers blanked, so alike ones count
        together): what made runs fail under the faults."""
        from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
        from dagster._core.instance.ref import InstanceRef

        reasons: Counter[str] = Counter()
        kinds = {
            DagsterEventType.ASSET_CHECK_EVALUATION,
            DagsterEventType.STEP_FAILURE,
            DagsterEventType.RUN_FAILURE,
        }
        with DagsterInstance.from_ref(InstanceRef.from_dir(str(self.deployment.home))) as instance:
            for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE])):
                records = instance.get_records_for_run(run.run_id, of_type=kinds).records
                lines: list[str] = []
                for record in records:
                    event = record.event_log_entry.dagster_event
                    data = event.event_specific_data if event else None
                    if event is not None and event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                        if not getattr(data, "passed", True):  # a failed check says why: that first
                            name, why = getattr(data, "check_name", "?"), getattr(data, "description", "")
                            lines.insert(0, f"check {name} failed: {why}")
                        continue
                    error = getattr(data, "error", None)
                    lines.append(error.message if error is not None else record.event_log_entry.message)
                first = next((line for line in lines if line), "no failure event").strip().splitlines()[0]
                first = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{16,}|\d+", "#", first)[:240]
                reasons[f"{run.job_name.split('_', 1)[-1]}: {first}"] += 1
        return dict(reasons.most_common())

    def _keep_logs(self) -> None:
        """The deployment's, the exporter's and Prometheus's logs into the work directory: stopping
        them removes their own."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        for part in (self.deployment, self.exporter, self.prometheus):
            for log in part.root.glob("*.log"):
                shutil.copy(log, logs / log.name)

    def _run_counts(self) -> dict[str, int]:
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
        from dagster._core.instance.ref import InstanceRef

        try:
            with DagsterInstance.from_ref(InstanceRef.from_dir(str(self.deployment.home))) as instance:
                return {
                    status.value: n
                    for status in DagsterRunStatus
                    if (n := instance.get_runs_count(RunsFilter(statuses=[status])))
                }
        except Exception as exc:
            return {"unknown": 0, str(exc)[:100]: 0}

    # -- the figures -----------------------------------------------------------------------------

    def alert_checks(self) -> dict[str, Any]:
        """Alerts fired and cleared, and the violations: a table behind long enough that the
        exporter, Prometheus and the rule must have seen it with no MemwalTableBehind; one firing
        while every direct read around it found the table not behind (the exporter's own figures
        then, from Prometheus, are the evidence); a storage outage long enough for
        MemwalTableUnreadable without it. While Prometheus still runs: the evidence is in it."""
        c = self.chaos
        samples = sorted(self.samples, key=lambda s: s.at)
        if not samples:
            return {}
        # What the exporter (read every interval), the scrape and the rule add to what the monitor sees.
        delay = c.exporter_interval + 2 * c.sample_seconds + 10
        blind = {
            id(f): (f.started, (f.recovered or f.ended or f.started) + delay)
            for f in self.faults
            if f.kind in ("exporter", "prometheus", "storage")
        }
        figures: dict[str, Any] = {}
        known = [s for s in samples if s.alerts is not None]
        for name in (
            "MemwalTableBehind",
            "MemwalTableUnreadable",
            "MemwalRegionMergeFailing",
            "MemwalGcNotRunning",
        ):
            spans = episodes([(s.at, any(a == name for a, _ in s.alerts or [])) for s in known])
            if spans:
                figures[name] = {
                    "fired": len(spans),
                    "cleared": sum(1 for _, end in spans if end < known[-1].at),
                }
        for target in self.targets:
            lags = [(s.at, s.lag.get(target.name)) for s in samples]
            behind = episodes([(at, None if lag is None else lag[1] > c.lag_threshold) for at, lag in lags])
            firing = episodes([(s.at, ("MemwalTableBehind", target.uri) in (s.alerts or [])) for s in known])
            for span in behind:
                if (
                    span[1] - span[0] >= delay
                    and not overlaps(span, list(blind.values()))
                    and not overlaps((span[0], span[1] + delay), firing)
                ):
                    self._violation(
                        target.name,
                        "alert_missed",
                        f"behind from {self._at(span[0])} to "
                        f"{self._at(span[1])}, MemwalTableBehind never fired",
                    )
            for span in firing:
                # A generation may pass the threshold between two direct reads and be merged before the
                # next: only a table clearly under it at every read around the alert is a false alarm.
                clearly_under = c.lag_threshold - 2 * c.sample_seconds
                around = [lag for at, lag in lags if span[0] - delay <= at <= span[1]]
                if around and all(lag is not None and lag[1] < clearly_under for lag in around):
                    self._violation(
                        target.name,
                        "alert_false",
                        f"MemwalTableBehind fired from {self._at(span[0])} to {self._at(span[1])}; read "
                        f"directly meanwhile the oldest pending generation was at most "
                        f"{max(lag[1] for lag in around if lag):.0f} s old; the exporter said then "
                        f"{self._exported_ages(target.uri, span[0])}",
                    )
        unreadable = episodes(
            [(s.at, any(a == "MemwalTableUnreadable" for a, _ in s.alerts or [])) for s in known]
        )
        for fault in self.faults:
            if fault.kind != "storage" or fault.recovered is None:
                continue
            outage = (fault.started, fault.recovered)
            others = [span for key, span in blind.items() if key != id(fault)]
            if (
                outage[1] - outage[0] >= c.unreadable_for_seconds + delay
                and not overlaps(outage, others)
                and not overlaps((outage[0], outage[1] + delay), unreadable)
            ):
                self._violation(
                    "deployment",
                    "alert_missed",
                    f"storage down {outage[1] - outage[0]:.0f} s from "
                    f"{self._at(outage[0])}, MemwalTableUnreadable never fired",
                )
        return figures

    def _violation(self, where: str, kind: str, detail: str) -> None:
        self.violations.append(Violation(where, kind, None, None, None, detail))

    def _at(self, when: float) -> str:
        return f"+{when - self.began:.0f} s"

    def _exported_ages(self, uri: str, when: float) -> str:
        """The oldest pending age of each region of a table as Prometheus had it at `when`."""
        import urllib.parse

        from tests.support.prometheus import get_json

        query = urllib.parse.urlencode(
            {"query": f'memwal_oldest_pending_age_seconds{{table="{uri}"}} > 0', "time": str(when)}
        )
        try:
            result = get_json(f"{self.prometheus.url}/api/v1/query?{query}")["data"]["result"]
        except Exception as exc:
            return f"unknown ({type(exc).__name__})"
        return json.dumps({r["metric"].get("region", "?")[:8]: round(float(r["value"][1])) for r in result})

    def process_figures(self) -> dict[str, Any]:
        """Per long-lived process: its restarts, and the slope of its memory and open files over the
        longest life it had (judged only past `leak_minutes`); a slope past the limits is a violation."""
        c = self.chaos
        out: dict[str, Any] = {}
        names = sorted({name for s in self.samples for name in s.usage})
        for name in names:
            lives: dict[int, list[tuple[float, float, int]]] = {}
            for s in self.samples:
                if name in s.usage:
                    pid, rss, fds = s.usage[name]
                    lives.setdefault(pid, []).append((s.at, rss, fds))
            longest = max(lives.values(), key=lambda life: life[-1][0] - life[0][0])
            minutes = (longest[-1][0] - longest[0][0]) / 60
            # The first fifth is start-up (imports, caches filling): the slope is read over the rest.
            steady = longest[len(longest) // 5 :]
            rss_slope = slope_per_hour([(at, rss) for at, rss, _ in steady])
            fds_slope = slope_per_hour([(at, fds) for at, _, fds in steady])
            judged = minutes >= c.leak_minutes and name not in STAND_INS
            growth = last_hour_growth([(at, rss) for at, rss, _ in longest])
            out[name] = {
                "processes": len(lives),
                "longest_life_min": round(minutes, 1),
                "rss_mib_first_last": [round(longest[0][1]), round(longest[-1][1])],
                "rss_mib_max": round(max(r for life in lives.values() for _, r, _ in life)),
                "fds_first_last": [longest[0][2], longest[-1][2]],
                "rss_slope_mib_per_hour": round(rss_slope, 1),
                "fds_slope_per_hour": round(fds_slope, 1),
                "rss_growth_last_hour_pct": None if growth is None else round(growth, 1),
                "judged": judged,
            }
            grew = growth is not None and growth > c.rss_growth_last_hour_pct and name not in STAND_INS
            if grew or (
                judged and (rss_slope > c.rss_slope_mib_per_hour or fds_slope > c.fds_slope_per_hour)
            ):
                self._violation("deployment", "leak", f"{name}: {json.dumps(out[name])}")
        return out

    def chart(self, path: Path) -> None:
        """Resident memory of each long-lived process over the run, as an SVG line chart."""
        series: dict[str, list[tuple[float, float]]] = {}
        for s in self.samples:
            for name, (_pid, rss, _fds) in s.usage.items():
                series.setdefault(name, []).append(((s.at - self.began) / 60, rss))
        line_chart(
            series,
            path,
            title="Resident memory under chaos (a drop is a kill and restart)",
            x_label="minutes",
            y_label="MiB",
            log_x=False,
        )

    def chaos_summary(self) -> dict[str, Any]:
        end = max((s.at for s in self.samples), default=time.time())
        lags = {
            t.name: round(max((lag[1] for s in self.samples if (lag := s.lag.get(t.name))), default=0.0), 1)
            for t in self.targets
        }
        return {
            "faults_by_kind": recovery_figures(self.faults, self.merged_at, end),
            "faults": [asdict(f) | {"at_s": round(f.started - self.began, 1)} for f in self.faults],
            "skipped": self.skipped,
            "merge_commits_seen": len(self.merged_at),
            "max_lag_s": lags,
            "processes": self.process_figures(),
            "runs": self.runs,
            **self.settled,
        }


def format_chaos(summary: dict[str, Any]) -> str:
    c = summary["chaos"]
    lines = [
        f"chaos: {summary['minutes_of_load']} min, {len(c['faults'])} deployment faults, "
        f"{c['merge_commits_seen']} merge commits seen; max lag by table {c['max_lag_s']} s; "
        f"drained {c.get('drained_after_s')} s after the load stopped, alerts cleared "
        f"{c.get('alerts_cleared_after_s')} s after",
        "  time from recovery to the next merge commit, by fault kind:",
    ]
    for kind, f in c["faults_by_kind"].items():
        lines.append(
            f"    {kind:<18} {f['count']:>3} faults, {f['measured']} measured (overtaken {f['overtaken']}): "
            f"median {f['median_s']} s, max {f['max_s']} s"
        )
    lines.append(
        f"  alerts: {c.get('alerts')}; runs by status: {c['runs']}; merge rounds by engine "
        f"{c.get('merge_rounds_by_engine')}; STARTED at the end {c.get('started_at_end')}"
    )
    lines += [f"    failed {n}x {reason}" for reason, n in c.get("run_failures", {}).items()]
    for name, p in c["processes"].items():
        lines.append(
            f"    {name:<14} {p['processes']} process(es), longest {p['longest_life_min']} min: RSS "
            f"{p['rss_mib_first_last']} MiB (slope {p['rss_slope_mib_per_hour']} MiB/h, last hour "
            f"{p['rss_growth_last_hour_pct']}%), open files "
            f"{p['fds_first_last']} (slope {p['fds_slope_per_hour']}/h){'' if p['judged'] else ' (not judged: short)'}"
        )
    if c["skipped"]:
        lines.append(f"  skipped: {c['skipped']}")
    return "\n".join([format_summary(summary), *lines])


def parse_args(argv: list[str] | None = None) -> tuple[ChaosConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="the CI mode: under 3 minutes, no Spark")
    mode.add_argument("--minutes", type=float, help="minutes of faults and load")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tables", type=int)
    parser.add_argument("--fault-every", type=float, help="mean seconds between faults")
    parser.add_argument(
        "--outage", type=float, nargs=2, metavar=("MIN", "MAX"), help="storage outage seconds"
    )
    parser.add_argument("--kinds", help=f"comma-separated fault kinds (default: all of {', '.join(FAULTS)})")
    parser.add_argument("--no-spark", action="store_true", help="no Connect server: every round local")
    parser.add_argument("--spark-min-rows", type=int)
    parser.add_argument("--lag-bound", type=float, help="seconds a table may stay behind")
    parser.add_argument("--leak-minutes", type=float, help="a process's life before its slope is judged")
    parser.add_argument(
        "--workdir", help="keep logs and tables here (default: a temp dir, removed on success)"
    )
    parser.add_argument("--json", help="also write the summary as JSON to this file")
    parser.add_argument("--chart", type=Path, help="draw the processes' memory over time here (SVG)")
    args = parser.parse_args(argv)
    config = SHORT if args.short else ChaosConfig(minutes=args.minutes, soak=LONG_SOAK)
    config = replace(config, seed=args.seed, soak=replace(config.soak, seed=args.seed))
    given: dict[str, Any] = {
        "tables": args.tables,
        "fault_every_seconds": args.fault_every,
        "outage_seconds": tuple(args.outage) if args.outage else None,
        "spark_min_rows": args.spark_min_rows,
        "lag_bound": args.lag_bound,
        "leak_minutes": args.leak_minutes,
        "spark": False if args.no_spark else None,
        "kinds": tuple(args.kinds.split(",")) if args.kinds else None,
    }
    config = replace(config, **{key: value for key, value in given.items() if value is not None})
    if unknown := set(config.kinds) - set(FAULTS):
        parser.error(f"--kinds: no fault kind {', '.join(sorted(unknown))}")
    return replace(config, soak=replace(config.soak, minutes=config.minutes)), args


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    os.environ.setdefault("LANCE_LOG", "error")
    # Every process started here (Dagster's, the exporter, the writers) imports this tree's memwal.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="memwal-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    chaos = Chaos(config, workdir)
    # A SIGTERM (a timeout, an operator) ends the run as an error does: every part started here is
    # stopped, not left running without its harness.
    signal.signal(signal.SIGTERM, lambda _signo, _frame: sys.exit(143))
    try:
        chaos.setup()
        print(
            f"chaos: the deployment is up after {time.monotonic() - started:.0f} s; logs in {workdir}; "
            f"its parts' PIDs in {workdir / 'parts.json'} (one killed by hand is restarted as its unit "
            "would, and counts as a fault)",
            flush=True,
        )
        chaos.run()
    finally:
        chaos.teardown()
    summary = chaos.summary(time.monotonic() - started)
    summary["chaos"] = chaos.chaos_summary()
    summary["violations"] = [v.to_json() for v in chaos.violations]
    if args.chart:
        chaos.chart(args.chart)
    return report(summary, format_chaos(summary), args, workdir)


if __name__ == "__main__":
    sys.exit(main())
