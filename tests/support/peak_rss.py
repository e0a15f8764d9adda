"""Run the `memwal` command and report its own peak memory: `python -m tests.support.peak_rss OUT ARGS...`.

The child writes VmHWM (its address space's high-water resident size, in KiB)
to OUT when it ends. A parent's `wait4` ru_maxrss would also count the pages a
child inherits when it is forked from a large test process, before exec.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from memwal_core.cli.main import main
from tests.support.paths import PROJECT_ROOT


def high_water_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def command_peak_mib(workdir: Path, *args: str) -> tuple[int, str]:
    """Run `memwal ARGS...` in its own process: its peak resident memory in MiB, and its stdout."""
    out = workdir / f"peak-{uuid.uuid4().hex}"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.peak_rss", str(out), *args],
        cwd=PROJECT_ROOT,
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return int(out.read_text()) // 1024, done.stdout


if __name__ == "__main__":
    out = Path(sys.argv[1])
    try:
        main(sys.argv[2:])
    finally:
        out.write_text(str(high_water_kib()))
