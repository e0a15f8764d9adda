"""Every command fails in bounded time, with exit 1 and one line, against storage that never answers."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.cli import every_command, timed_cli
from tests.support.silent import SilentEndpoint

TABLE = "s3://silent-bucket/table"
COMMANDS = every_command("s3://silent-bucket/source.csv")
# A short limit for the command matrix, and the default a user gets, which must fail within 60 s.
SHORT = {"timeout": "2s", "connect_timeout": "1s", "client_retry_timeout": "5"}
DEFAULT_BOUND = 60.0
# Eleven interpreters starting at once on a loaded 2-core machine take a while before their first request.
STARTUP = 20.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SilentEndpoint]:
    with SilentEndpoint() as silent:
        yield silent


def test_every_command_fails_within_its_time_limit(endpoint: SilentEndpoint) -> None:
    runs = {
        name: [name, TABLE, *extra, *endpoint.storage_options(**SHORT)] for name, extra in COMMANDS.items()
    }
    # The default limits, once: the command a user runs without setting any.
    runs["status (default limits)"] = ["status", TABLE, *endpoint.storage_options()]
    with ThreadPoolExecutor(len(runs)) as pool:
        results = dict(zip(runs, pool.map(timed_cli, runs.values()), strict=True))
    for name, (done, seconds) in results.items():
        bound = DEFAULT_BOUND if "default" in name else float(SHORT["client_retry_timeout"]) + STARTUP
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (name, done.returncode, done.stderr)
        assert len(lines) == 1 and "storage did not answer" in lines[0], (name, done.stderr)
        assert endpoint.url in lines[0], (name, lines[0])
        assert "silent-secret" not in done.stderr + done.stdout
        assert seconds < bound, f"{name} took {seconds:.1f} s (bound {bound:.0f} s)"
        print(f"{name}: exit {done.returncode} in {seconds:.1f} s")
