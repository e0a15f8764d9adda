"""Python processes whose clock is off, through libfaketime (Debian's `faketime`, installed by .ci/run).

libfaketime, preloaded into the process, adds an offset to every wall-clock call it makes: Python's
`time.time`, and the Rust clocks of Lance and obstore, which sign S3 requests with theirs. What the
store stamps stays real: file times on local disk come from the kernel, object times on SeaweedFS
from the server. So memwal in such a process sees exactly what it sees on a host whose clock is
off. The monotonic clock is left alone (`FAKETIME_DONT_FAKE_MONOTONIC`): timeouts keep working.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import PROJECT_ROOT


def skewed_python(offset: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python *args` with its clock `offset` off ("+2h", "-10m", "+8d": libfaketime's format)."""
    return subprocess.run(
        ["faketime", "-f", offset, sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
        timeout=timeout,
    )


def skewed_cli(offset: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `memwal` command with its clock `offset` off."""
    return skewed_python(offset, "-m", "memwal_core.cli.main", *args)
