"""Kills the test servers' process groups when the test process is gone, however it ended.

`tests.support.service.start_server` starts one of these per test process,
its stdin a pipe only the test process holds, and tells it each server's
process group as it starts (`+PGID`) and stops (`-PGID`). A test process
that dies, even by `kill -9`, closes the pipe: this process then reads end of
file and ends every group still listed, SIGTERM first, SIGKILL after
`GRACE_SECONDS`. A parent-death signal (PR_SET_PDEATHSIG) would reach only the
server's own process, not the Python daemon a Spark JVM forks, and fires when
the thread that started the server ends, not the process. Runs as a script
with the standard library only, in a session of its own, so a terminal's
Ctrl-C or a signal to the test's process group does not end it first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

GRACE_SECONDS = 3.0


def _end(groups: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        if sig == signal.SIGTERM:
            time.sleep(GRACE_SECONDS if groups else 0)


def main() -> None:
    groups: set[int] = set()
    for line in sys.stdin:
        word = line.strip()
        if word.startswith("+"):
            groups.add(int(word[1:]))
        elif word.startswith("-"):
            groups.discard(int(word[1:]))
    _end(groups)


if __name__ == "__main__":
    main()
