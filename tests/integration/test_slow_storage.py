"""Every command fails in bounded time, with exit 1 and one line, on storage that answers too slowly (issue 28, item 4).

A real SeaweedFS server behind a proxy that holds each answer back, or sends
its body a byte at a time. Neither ever stops sending for long, so a per-read
(idle) timeout never fires: a status took 262 s against 20 s answers and a
trickled manifest read ended after 462 s as "cannot be read" (exit 2, as if
the metadata were corrupt). The storage time limit (`timeout`) now bounds the
whole answer of each request, and a command fails within the retry limit
(`client_retry_timeout`): exit 1, "storage did not answer".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.storage.options import StorageOptions
from tests.support.cli import every_command, timed_cli
from tests.support.slow import SlowProxy

# The table exists, with a backlog; the ingest source is a file on the same sick storage.
COMMANDS = every_command("s3://memwal-test/slow-source.csv")
SHORT = {"timeout": "2s", "connect_timeout": "1s", "client_retry_timeout": "5"}
# The default limits a user gets: every command fails within about a minute.
DEFAULT_BOUND = 60.0
# Interpreters starting at once on a loaded 2-core machine take a while before their first request;
# three at a time keeps that near what one takes.
STARTUP = 20.0
PARALLEL = 3


@pytest.fixture(scope="module")
def table(seaweed: Any) -> Iterator[str]:
    uri = f"s3://memwal-test/slow-{uuid.uuid4().hex}"
    write_demo_table(uri, StorageOptions(seaweed.storage_options()), base_rows=50, regions=2, rounds=1)
    yield uri


def _check(results: dict[str, tuple[Any, float]], bound: float, secret: str) -> None:
    for name, (done, seconds) in results.items():
        print(f"{name}: exit {done.returncode} in {seconds:.1f} s: {done.stderr.strip()[-300:]}")
    for name, (done, seconds) in results.items():
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (name, done.returncode, done.stderr)
        assert len(lines) == 1 and "storage did not answer" in lines[0], (name, done.stderr)
        assert secret not in done.stderr + done.stdout
        assert seconds < bound, f"{name} took {seconds:.1f} s (bound {bound:.0f} s)"


@pytest.mark.parametrize("sickness", [{"delay": 3.0}, {"byte_interval": 0.2}], ids=["slow", "trickle"])
def test_every_command_fails_within_its_time_limit(
    seaweed: Any, table: str, sickness: dict[str, float]
) -> None:
    with SlowProxy(seaweed.ports["s3.port"], **sickness) as proxy:
        options = proxy.storage_options(seaweed.access_key, seaweed.secret_key, **SHORT)
        runs = {name: [name, table, *extra, *options] for name, extra in COMMANDS.items()}
        with ThreadPoolExecutor(PARALLEL) as pool:
            results = dict(zip(runs, pool.map(timed_cli, runs.values()), strict=True))
    _check(results, float(SHORT["client_retry_timeout"]) + STARTUP, seaweed.secret_key)


@pytest.mark.parametrize(
    "sickness", [{"delay": 20.0}, {"byte_interval": 0.2}], ids=["20s-answers", "trickle"]
)
def test_status_with_default_limits_fails_within_a_minute(
    seaweed: Any, table: str, sickness: dict[str, float]
) -> None:
    with SlowProxy(seaweed.ports["s3.port"], **sickness) as proxy:
        done = timed_cli(["status", table, *proxy.storage_options(seaweed.access_key, seaweed.secret_key)])
    _check({"status": done}, DEFAULT_BOUND, seaweed.secret_key)
