"""`memwal metrics TABLE...`: the tables' backlog and service outcomes for Prometheus.

Without `--listen` it reads every table once and prints the text exposition;
with `--listen HOST:PORT` it serves `/metrics`, reading the tables at most
once per `--interval` however often it is scraped (each read is the sensor's
cheap per-region read, `TableWatch`, backed off on quiet regions down to one
read per `--max-probe-interval`). Names start with `memwal_`; the labels
are `table` (the URI as given, which memwal refuses to hold credentials) and
`region` (a UUID), so no label or value can carry a credential. A table that
cannot be read reports `memwal_table_up 0` and none of its other figures; the
others are still served.

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
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memwal_core.errors import BadInputError, MemwalError, first_line
from memwal_core.model.outcomes import GC, SERVICES
from memwal_core.model.table import MemWalTable
from memwal_core.services.backoff import EVERY_READ, Backoff
from memwal_core.services.watch import RegionWatch, TableReading, TableWatch
from memwal_core.storage.object_store import REQUEST_KINDS, by_kind
from memwal_core.storage.options import StorageOptions

log = logging.getLogger("memwal")

# Tables read at once; each read also runs its regions in parallel on the table's own pool.
TABLES_AT_ONCE = 8

# name, help, value of a region's figures (None: unknown, no sample).
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
        "Seconds since the oldest pending generation was flushed (0 without a backlog): the merge lag.",
        lambda r, now: r.backlog.oldest_pending_age(now),
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


@dataclass
class WatchedTable:
    """One table the exporter reads: opened on first use, its last reading or the error that stopped it."""

    uri: str
    options: StorageOptions
    backoff: Backoff = EVERY_READ
    watch: TableWatch | None = None
    reading: TableReading | None = None
    error: str | None = None
    # The table could not even be opened, and no retry can fix that (no such table, no MemWAL).
    refused: bool = False

    def read(self) -> None:
        try:
            if self.watch is None:
                self.watch = TableWatch(
                    MemWalTable.open(self.uri, self.options.for_service("metrics")), self.backoff
                )
            self.reading = self.watch.read()
        except MemwalError as exc:
            self.refused = self.watch is None and isinstance(exc, BadInputError)
            self._failed(first_line(exc))
            return
        except Exception as exc:  # a reading must not stop the exporter; one line, as the CLI reports
            self._failed(f"{type(exc).__name__}: {first_line(exc)}")
            return
        if self.error is not None:
            log.info("memwal metrics: %s is readable again", self.uri)
        self.error = None

    def own_requests(self) -> dict[str, int]:
        """The exporter's requests on the table by kind, every read since it opened it (failed ones too)."""
        return by_kind(self.watch.table.store.stats.lifetime()) if self.watch is not None else {}

    def _failed(self, message: str) -> None:
        if message != self.error and not self.refused:  # once per new error, not per scrape; refusals exit
            log.warning("memwal metrics: %s cannot be read: %s", self.uri, message)
        self.error, self.reading = message, None


class TablesCollector(Collector):
    """Prometheus collector over the watched tables, reading them at most once per `interval`."""

    def __init__(self, tables: list[WatchedTable], *, interval: float, lag_threshold: float) -> None:
        self.tables = tables
        self.interval = interval
        self.lag_threshold = lag_threshold
        self._lock = threading.Lock()
        self._read_at: float | None = None

    def refresh(self) -> None:
        """Read every table now (tables in parallel)."""
        with ThreadPoolExecutor(min(TABLES_AT_ONCE, len(self.tables))) as pool:
            list(pool.map(WatchedTable.read, self.tables))
        self._read_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at >= self.interval:
                self.refresh()
            yield from self._families(time.time())

    def _families(self, now: float) -> Iterator[Metric]:
        def table_gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"memwal_{name}", text, labels=["table"])

        up = table_gauge("table_up", "1 if the last read of the table succeeded, else 0.")
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
            up.add_metric(labels, 0 if table.reading is None else 1)
            threshold.add_metric(labels, self.lag_threshold)
            reading = table.reading
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
                    figure = value(region, now)
                    if figure is not None:
                        regions[name].add_metric([table.uri, region.region], figure)
        yield up
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
        collector = TablesCollector(tables, interval=args.interval, lag_threshold=args.lag_threshold)
        collector.refresh()
    except MemwalError as exc:
        print(f"memwal metrics: error: {exc}", file=sys.stderr)
        return exc.exit_code
    refused = [t for t in tables if t.refused]
    if refused:  # the wrong table named: say so rather than serve a table that can never be read
        print(f"memwal metrics: error: {refused[0].error}", file=sys.stderr)
        return BadInputError.exit_code
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if args.listen is None:
        sys.stdout.write(generate_latest(registry).decode())
        return 0 if all(t.reading is not None for t in tables) else 1
    host, port = args.listen
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        print(
            f"memwal metrics: error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    print(f"memwal metrics: serving http://{host}:{port}/metrics for {len(tables)} table(s)", file=sys.stderr)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    thread.join(timeout=5)
    return 0
