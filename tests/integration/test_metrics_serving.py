"""`memwal metrics --listen` under sick storage and idle clients: every scrape answers within its bound.

A table whose storage accepts connections and never answers is read on a
thread of its own: the scrape answers with the other tables' figures and
that table's `memwal_table_up 0`. An outage is logged once, however its
error text varies from read to read (Lance's names the milliseconds it
took). Idle connections, more than the process has file descriptors for,
keep no scrape out.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from memwal_core.cli.metrics import SCRAPE_WAIT
from memwal_core.cli.metrics_server import IDLE_TIMEOUT, MAX_CONNECTIONS
from memwal_core.demo import write_demo_table
from tests.integration.test_metrics import samples, total
from tests.support.cli import option_flags
from tests.support.paths import PROJECT_ROOT
from tests.support.prometheus import Exporter, wait_for
from tests.support.service import LOOPBACK
from tests.support.silent import SilentEndpoint
from tests.support.write_faults import Fault, ResponseFaults

# A scrape answers within the exporter's wait for due reads, plus room for two busy cores.
SCRAPE_BOUND = SCRAPE_WAIT + 3
UNIT = PROJECT_ROOT / "docs" / "deploy" / "memwal-metrics.service"


def timed_scrape(exporter: Exporter) -> tuple[dict[str, dict[tuple[tuple[str, str], ...], float]], float]:
    started = time.monotonic()
    text = exporter.scrape(timeout=SCRAPE_BOUND + 30)
    return samples(text), time.monotonic() - started


def up(found: dict[str, Any], uri: str) -> float | None:
    value: float | None = found.get("memwal_table_up", {}).get((("table", uri),))
    return value


def test_a_table_whose_storage_never_answers_holds_up_no_scrape(tmp_path: Path) -> None:
    healthy = str(tmp_path / "demo")
    write_demo_table(healthy)
    with SilentEndpoint() as silent:
        sick = "s3://memwal-test/silent"
        # Every table is read at most once a second, the sick one's read never ends (45 s, storage's limits).
        with Exporter([healthy, sick], *silent.storage_options(), "--interval", "1") as exporter:
            scrapes = []
            for _ in range(4):
                found, seconds = timed_scrape(exporter)
                assert seconds < SCRAPE_BOUND
                assert up(found, healthy) == 1 and up(found, sick) == 0
                assert total(found, "memwal_pending_generations") == 24
                scrapes.append(found.get("memwal_read_age_seconds", {}))
                time.sleep(1)
    # The healthy table's figures are fresh; the sick one's age (since the exporter started) grows.
    assert all(age[(("table", healthy),)] < 1 + SCRAPE_BOUND for age in scrapes), scrapes
    ages = [age[(("table", sick),)] for age in scrapes]
    assert ages == sorted(ages) and ages[-1] - ages[0] >= 3, ages


def test_an_outage_is_logged_once_however_its_error_text_varies(seaweed: Any) -> None:
    uri = f"s3://memwal-test/outage-{uuid.uuid4().hex}"
    write_demo_table(uri, seaweed.storage_options(), regions=1, rounds=1)
    # Lance's requests fail (memwal's own pass): its error names the milliseconds its retries took.
    lance_fails = Fault("", "", every=1, agent="pylance")
    with ResponseFaults(int(seaweed.endpoint.rsplit(":", 1)[1]), [lance_fails]) as proxy:
        # No retries by Lance's store (its default, 10, spends about 18 s a read): each scrape's read fails.
        options = {**seaweed.storage_options(), "aws_endpoint": proxy.url, "client_max_retries": "0"}
        with Exporter([uri], *option_flags(options), "--interval", "0.2") as exporter:
            for _ in range(3):  # each scrape starts a read and waits for it to fail (two to four seconds)
                time.sleep(0.3)
                failed = len(lance_fails.failed)
                assert up(timed_scrape(exporter)[0], uri) == 0
                assert len(lance_fails.failed) > failed
            proxy.faults.clear()
            wait_for("the table readable again", lambda: up(timed_scrape(exporter)[0], uri) == 1)
            log = exporter.log()
    assert log.count("cannot be read") == 1, log
    assert re.search(r"LanceError.* in [0-9.]+m?s", log), log
    assert log.count("is readable again") == 1, log


def test_a_read_past_its_deadline_puts_its_table_down_until_one_ends(seaweed: Any) -> None:
    uri = f"s3://memwal-test/deadline-{uuid.uuid4().hex}"
    write_demo_table(uri, seaweed.storage_options(), regions=1, rounds=1)
    with ResponseFaults(int(seaweed.endpoint.rsplit(":", 1)[1])) as proxy:
        # A request ends after 5 s without an answer, a call after 6 s of retries: the read's deadline comes first.
        limits = {"timeout": "5s", "client_retry_timeout": "6"}
        options = {**seaweed.storage_options(), **limits, "aws_endpoint": proxy.url}
        args = [*option_flags(options), "--interval", "0.2", "--read-timeout", "2"]
        with Exporter([uri], *args) as exporter:
            wait_for("the table up", lambda: up(timed_scrape(exporter)[0], uri) == 1)
            logged = len(exporter.log())
            # The store accepts every request and never answers one.
            proxy.faults.append(Fault("", "", every=1, answer="silent"))
            seen: list[float] = []

            def down() -> bool:
                found, seconds = timed_scrape(exporter)
                seen.append(seconds)
                return up(found, uri) == 0

            wait_for("the table down", down, timeout=30)
            assert max(seen) < SCRAPE_BOUND, seen
            proxy.faults.clear()
            wait_for("the table up again", lambda: up(timed_scrape(exporter)[0], uri) == 1, timeout=30)
            log = exporter.log()[logged:]
    assert log.count("cannot be read") == 1 and "no read finished within 2 s" in log, log
    assert log.count("is readable again") == 1, log


def test_idle_connections_past_the_file_descriptor_limit_keep_no_scrape_out(tmp_path: Path) -> None:
    """1,100 connections that never send a request, to an exporter with systemd's default 1,024 descriptors."""
    limit = re.search(r"(?m)^LimitNOFILE=(\d+)$", UNIT.read_text())
    assert limit and int(limit.group(1)) >= 8192, "the shipped unit raises the descriptor limit"
    uri = str(tmp_path / "demo")
    write_demo_table(uri, regions=1, rounds=1)
    idle: list[socket.socket] = []
    with Exporter([uri], open_files=1024) as exporter:
        descriptors = Path(f"/proc/{exporter.pid}/fd")
        before = len(list(descriptors.iterdir()))
        try:
            refused = 0
            while len(idle) < 1100 and refused < 3:  # one at a time: none waits in a full accept queue
                try:
                    idle.append(socket.create_connection((LOOPBACK, exporter.port), timeout=3))
                except OSError:  # the server accepts no more
                    refused += 1
            found, seconds = timed_scrape(exporter)
            assert up(found, uri) == 1
            assert seconds < 3, f"a scrape took {seconds:.1f} s beside {len(idle)} idle connections"
            assert len(idle) == 1100
            # The server holds the newest connections only, and closes those once idle.
            assert len(list(descriptors.iterdir())) <= before + MAX_CONNECTIONS + 8
            wait_for(
                "every idle connection closed",
                lambda: len(list(descriptors.iterdir())) <= before + 2,
                timeout=IDLE_TIMEOUT + 10,
            )
        finally:
            for connection in idle:
                with contextlib.suppress(OSError):
                    connection.close()
