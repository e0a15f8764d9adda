"""The real `memwal` command in a subprocess, timed."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.paths import PROJECT_ROOT


def timed_cli(args: list[str], *, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `python -m memwal_core.cli.main *args` from the project root; the result and its seconds."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - started
