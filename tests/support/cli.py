"""The real `memwal` command in a subprocess, timed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

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


def option_flags(options: Mapping[str, str]) -> list[str]:
    """Storage options as the command's `-o KEY=VALUE` arguments."""
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def every_command(source: str) -> dict[str, list[str]]:
    """Every `memwal` command with the arguments it requires (after the table URI); `source` for ingest."""
    return {
        "status": [],
        "merge": [],
        "gc": [],
        "catchup": [],
        "snapshot": [],
        "compact": [],
        "retain": ["--older-than", "7d"],
        "ingest": [source],
        "init": ["--primary-key", "id", "--unsharded"],
        "demo": [],
    }


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m memwal_core.cli.main *args` from `cwd` (any folder: the project is put on PYTHONPATH)."""
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **(env or {})},
        timeout=600,
    )
