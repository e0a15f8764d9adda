"""Compile a checkout's modules before a benchmark times commands run from it.

An installed memwal has its modules compiled (pip compiles a wheel's at
install). A checkout run in place does not, and where the environment sets
`PYTHONDONTWRITEBYTECODE=1` (these machines do) Python never writes them: every
command then compiles what it imports, 30-50 ms of CPU for `memwal status` and
more for a merge, which imports more. Benchmarks time memwal as installed.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGES = ("memwal_core", "memwal_pipelines")


def compile_checkout(code: Path) -> None:
    """Write the bytecode of every module of `code`'s packages (stale or missing ones only)."""
    for package in PACKAGES:
        compileall.compile_dir(code / package, quiet=1)
