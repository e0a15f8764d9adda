"""`memwal metrics TABLE...`: the tables' backlog and service outcomes for Prometheus.

Without `--listen` it reads every table once and prints the text exposition;
with `--listen HOST:PORT` it serves `/metrics` (`metrics_server.py`), reading
the tables at most once per `--interval` however often it is scraped (each
read is the sensor's cheap per-region read, `TableWatch`, backed off on quiet
regions down to one read per `--max-probe-interval`). Names start with
`memwal_`; the labels are `table` (the URI as given, which memwal refuses to
hold credentials) and `region` (a UUID), so no label or value can carry a
credential.

Each table is read on a thread of its own, so a table whose storage never
answers holds up no other table and no scrape: a scrape starts the reads that
are due, waits for them at most `SCRAPE_WAIT` seconds, and answers with what
it knows. A table is down (`memwal_table_up 0`, none of its other figures)
while its last read failed or while a read has run past `--read-timeout`;
`memwal_read_age_seconds` says how old its last good figures are. An outage
is logged once, when it starts, and its end once.

What keeping a table costs comes from the services' outcome records: the
requests every recorded run made through memwal's store, by kind (the
exporter's own added, counted in this process), and what the table holds by
kind as GC's last run listed it. Their labels `service` and `kind` take
fixed names.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from memwal_core.errors import BadInputError, MemwalError, first_line
from memwal_core.model.outcomes import GC, SERVICES
from memwal_core.model.table import MemWalTable
from memwal_core.services.backoff import EVERY_READ, Backoff
from memwal_core.services.watch import RegionWatch, TableReading, TableWatch
from memwal_core.storage.object_store import REQUEST_KINDS, by_kind
from memwal_core.storage.options import StorageOptions

log = logging.getLogger("memwal")

# Seconds a scrape waits for the reads it started: well inside Prometheus's default scrape timeout (10 s).
# A scrape that announces a shorter timeout waits half of it.
SCRAPE_WAIT = 5.0
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"

# name, help, value of a region's figures as of the read at the given time (None: unknown, no sample).
RegionFigure = tuple[str, str, Callable[[RegionWatch, float], float | None]]
REGION_FIGURES: list[RegionFigure] = [
    ("pending_generations", "Flushed generations not merged yet.", lambda r, _: len(r.backlog.pending)),
    (
        "pending_rows",
        "Rows of the pending generations (only when every one records its row count).",
        lambda r, _: r.pending_rows,
    ),
    ("pending_bytes", "In-memory bytes of the pending generations.", lambda r, _: r.backlog.pending_bytes),
    (
        "oldest_pending_age_seconds",
        "Seconds the oldest pending generation had waited when the table was last read (0 without a "
        "backlog): the merge lag, as of memwal_read_age_seconds ago.",
        lambda r, read_at: r.backlog.oldest_pending_age(read_at),
    ),
    ("merged_generation", "The highest merged generation.", lambda r, _: r.backlog.merged_generation),
    ("flushed_generation", "The latest flushed generation.", lambda r, _: r.backlog.latest_flushed),
    (
        "wal_entries_held",
        "WAL entries past the last flushed generation, which a new writer replays (as the manifest last recorded).",
        lambda r, _: r.wal_entries_held,
    ),
    (
        "gc_eligible_bytes",
        "Bytes of generations GC may release now (merged, caught up by every index, past time travel).",
        lambda r, _: r.gc_eligible_bytes,
    ),
    (
        "region_merge_failures",
        "Merge runs in a row that failed on this region (0 once one merged it).",
        lambda r, _: r.merge_failures,
    ),
]


class WatchedTable:
    """One table the exporter reads, one read at a time on a thread of its own.

    Keeps the last good reading and whether the table is down (`error`, the last read's failure or its
    overdue read); the table is opened on the first read that can.
    """

    def __init__(self, uri: str, options: StorageOptions, backoff: Backoff = EVERY_READ) -> None:
        self.uri = uri
        self.options = options
        self.backoff = backoff
        self.watch: TableWatch | None = None
        self.reading: TableReading | None = None
        self.error: str | None = None
        # The table could not even be opened, and no retry can fix that (no such table, no MemWAL).
        self.refused = False
        # When the figures date from until a read succeeds: the exporter's start.
        self._since = time.time()
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._started = -math.inf  # monotonic start of the last read

    def start_read(self, interval: float) -> bool:
        """Start a read unless one is in flight or the last started under `interval` ago; whether it did."""
        with self._lock:
            now = time.monotonic()
            if not self._idle.is_set() or now - self._started < interval:
                return False
            self._started = now
            self._idle.clear()
        threading.Thread(target=self._read, name=f"memwal-metrics-read {self.uri}", daemon=True).start()
        return True

    def wait(self, until: float | None) -> None:
        """Until the read in flight ends, or the monotonic time `until`."""
        self._idle.wait(None if until is None else max(0.0, until - time.monotonic()))

    def check_deadline(self, seconds: float) -> None:
        """A read in flight for more than `seconds` puts the table down; its thread runs on until storage's
        own time limits end it, and no other read of the table starts meanwhile."""
        with self._lock:
            if not self._idle.is_set() and time.monotonic() - self._started > seconds:
                self._down(f"no read finished within {seconds:g} s")

    def served(self) -> tuple[TableReading | None, float]:
        """The reading to serve (None while the table is down) and when the last good one was taken."""
        with self._lock:
            since = self._since if self.reading is None else self.reading.read_at
            return (self.reading if self.error is None else None), since

    def own_requests(self) -> dict[str, int]:
        """The exporter's requests on the table by kind, every read since it opened it (failed ones too)."""
        watch = self.watch
        return by_kind(watch.table.store.stats.lifetime()) if watch is not None else {}

    def _read(self) -> None:
        try:
            if self.watch is None:
                self.watch = TableWatch(
                    MemWalTable.open(self.uri, self.options.for_service("metrics")), self.backoff
                )
            reading = self.watch.read()
        except MemwalError as exc:
            self._failed(first_line(exc), refused=self.watch is None and isinstance(exc, BadInputError))
            return
        except Exception as exc:  # a reading must not stop the exporter; one line, as the CLI reports
            self._failed(f"{type(exc).__name__}: {first_line(exc)}")
            return
        with self._lock:
            self._idle.set()
            if self.error is not None:
                log.info("memwal metrics: %s is readable again", self.uri)
            self.reading, self.error = reading, None

    def _failed(self, message: str, *, refused: bool = False) -> None:
        with self._lock:
            self._idle.set()
            self.refused = refused
            self._down(message)

    def _down(self, message: str) -> None:
        """Called under the lock. Logged once per outage: the error text may differ from read to read
        (Lance's names the milliseconds its retries took)."""
        if self.error is None:
            log.warning("memwal metrics: %s cannot be read: %s", self.uri, message)
        self.error = message


class TablesCollector(Collector):
    """Prometheus collector over the watched tables, each read at most once per `interval`."""

    def __init__(
        self, tables: list[WatchedTable], *, interval: float, lag_threshold: float, read_timeout: float
    ) -> None:
        self.tables = tables
        self.interval = interval
        self.lag_threshold = lag_threshold
        self.read_timeout = read_timeout

    def refresh(self, wait: float | None) -> None:
        """Start the reads that are due and wait for them, at most `wait` seconds (None: until they end)."""
        started = [table for table in self.tables if table.start_read(self.interval)]
        until = None if wait is None else time.monotonic() + min(wait, self.read_timeout)
        for table in started:
            table.wait(until)
        for table in self.tables:
            table.check_deadline(self.read_timeout)

    def scrape(self, headers: Mapping[str, str], registry: CollectorRegistry) -> tuple[bytes, str]:
        """One scrape's answer, in the format its Accept header asks for: reads due started and waited
        for (at most `SCRAPE_WAIT`, or half the timeout the scrape announces), then what is known."""
        wait = SCRAPE_WAIT
        announced = headers.get(SCRAPE_TIMEOUT_HEADER)
        with contextlib.suppress(ValueError):
            wait = min(wait, float(announced or "inf") / 2)
        self.refresh(wait)
        encoder, content_type = choose_encoder(headers.get("Accept", ""))
        return encoder(registry), content_type

    def collect(self) -> Iterator[Metric]:
        yield from self._families(time.time())

    def _families(self, now: float) -> Iterator[Metric]:
        def table_gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"memwal_{name}", text, labels=["table"])

        up = table_gauge(
            "table_up",
            "1 if the last read of the table succeeded and none has run past --read-timeout, else 0.",
        )
        age = table_gauge(
            "read_age_seconds",
            "Seconds since the last successful read of the table began (since the exporter started, before one).",
        )
        threshold = table_gauge(
            "lag_threshold_seconds", "The merge lag above which the table is behind (alerts, freshness)."
        )
        table_figures = {
            "table_version": table_gauge("table_version", "The table version the last read saw."),
            "regions": table_gauge("regions", "Regions of the table."),
            "read_seconds": table_gauge("read_seconds", "Seconds the last read of the table took."),
            "read_requests": table_gauge(
                "read_requests", "Storage requests the last read made (Lance's not counted)."
            ),
        }
        outcome_gauges = {
            service: (
                table_gauge(f"last_{service}_success", f"1 if the last {service} run succeeded, else 0."),
                table_gauge(f"last_{service}_timestamp_seconds", f"When the last {service} run ended."),
                table_gauge(
                    f"last_{service}_success_timestamp_seconds",
                    f"When the last successful {service} run ended.",
                ),
            )
            for service in SERVICES
        }
        regions = {
            name: GaugeMetricFamily(f"memwal_{name}", text, labels=["table", "region"])
            for name, text, _value in REGION_FIGURES
        }
        requests = CounterMetricFamily(
            "memwal_requests",
            "Storage requests memwal's services made through its own store, by service and S3 request kind, "
            'as their outcome records sum them (service="metrics": this exporter\'s, since it started). '
            "Lance's requests (table data, indexes, its manifests) are not counted.",
            labels=["table", "service", "kind"],
        )
        stored = {
            name: GaugeMetricFamily(f"memwal_stored_{name}", text, labels=["table", "kind"])
            for name, text in (
                (
                    "objects",
                    "Objects the table holds by kind, as GC's last run listed them (wal_entries: positions).",
                ),
                (
                    "bytes",
                    "Bytes the table holds by kind, as GC's last run listed them (WAL entries: unknown).",
                ),
            )
        }
        stored_at = table_gauge(
            "stored_as_of_timestamp_seconds", "When the GC run that found memwal_stored_* ended."
        )
        for table in self.tables:
            labels = [table.uri]
            reading, since = table.served()
            up.add_metric(labels, 0 if reading is None else 1)
            age.add_metric(labels, max(0.0, now - since))
            threshold.add_metric(labels, self.lag_threshold)
            if reading is None:
                continue
            for name, number in (
                ("table_version", reading.table_version),
                ("regions", len(reading.regions)),
                ("read_seconds", reading.seconds),
                ("read_requests", reading.requests),
            ):
                table_figures[name].add_metric(labels, number)
            for service, outcome in reading.outcomes.items():
                success, at, success_at = outcome_gauges[service]
                success.add_metric(labels, 1 if outcome.ok else 0)
                at.add_metric(labels, outcome.at)
                if outcome.last_success_at is not None:
                    success_at.add_metric(labels, outcome.last_success_at)
            counted = {service: outcome.requests for service, outcome in reading.outcomes.items()}
            for service, counts in {**counted, "metrics": table.own_requests()}.items():
                for kind in REQUEST_KINDS:
                    requests.add_metric([table.uri, service, kind], counts.get(kind, 0))
            held = reading.outcomes.get(GC)
            if held is not None and held.stored_at is not None:
                stored_at.add_metric(labels, held.stored_at)
                for kind, figures in held.stored.items():
                    stored["objects"].add_metric([table.uri, kind], figures.objects)
                    if figures.bytes is not None:
                        stored["bytes"].add_metric([table.uri, kind], figures.bytes)
            for region in reading.regions:
                for name, _text, value in REGION_FIGURES:
                    # As of the read: a generation merged since is not reported as waiting still longer.
                    figure = value(region, reading.read_at)
                    if figure is not None:
                        regions[name].add_metric([table.uri, region.region], figure)
        yield up
        yield age
        yield threshold
        yield from table_figures.values()
        for gauges in outcome_gauges.values():
            yield from gauges
        yield from regions.values()
        yield requests
        yield from stored.values()
        yield stored_at


def max_probe_interval(args: argparse.Namespace) -> float:
    """`--max-probe-interval`, by default half the lag threshold (at least the interval): a new
    generation on a quiet region shows long before it could be late, so the lag alert is on time."""
    if args.max_probe_interval is not None:
        return float(args.max_probe_interval)
    return max(float(args.interval), float(args.lag_threshold) / 2)


def run_metrics(args: argparse.Namespace) -> int:
    """The command: print once, or serve until SIGTERM or SIGINT."""
    try:
        options = StorageOptions.parse(args.storage_option)
        backoff = Backoff(tick=args.interval, bound=max_probe_interval(args))
        tables = [WatchedTable(uri, options, backoff) for uri in dict.fromkeys(args.tables)]
    except MemwalError as exc:
        print(f"memwal metrics: error: {exc}", file=sys.stderr)
        return exc.exit_code
    collector = TablesCollector(
        tables, interval=args.interval, lag_threshold=args.lag_threshold, read_timeout=args.read_timeout
    )
    # Printing waits for every read (storage's time limits end them); serving starts after one scrape's wait.
    collector.refresh(None if args.listen is None else SCRAPE_WAIT)
    if any(t.refused for t in tables):  # the wrong table named (its error logged): do not serve it forever
        return BadInputError.exit_code
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if args.listen is None:
        sys.stdout.write(generate_latest(registry).decode())
        return 0 if all(t.served()[0] is not None for t in tables) else 1
    from memwal_core.cli.metrics_server import serve

    host, port = args.listen

    def listening() -> None:
        print(
            f"memwal metrics: serving http://{host}:{port}/metrics for {len(tables)} table(s)",
            file=sys.stderr,
        )

    try:
        serve(host, port, lambda headers: collector.scrape(headers, registry), listening)
    except OSError as exc:
        print(
            f"memwal metrics: error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    return 0
