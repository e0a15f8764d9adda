"""Kills the test servers' process groups when the test process is gone, however it ended.

`tests.support.service.start_server` starts one of these per test process,
its stdin a pipe only the test process holds, and tells it each server's
process group as it starts (`+PGID PID START`: the server's main process
and when it started) and stops (`-PGID`). A test process that dies, even
by `kill -9`, closes the pipe: this process then reads end of file and ends
every group still listed, SIGTERM first, SIGKILL after `GRACE_SECONDS`,
if its main process still runs in it. Else the group is left alone: a group
id is free again once its last member is gone, and PIDs wrap around
quickly on a busy machine (32,768 here), so it may be someone else's.
A parent-death signal (PR_SET_PDEATHSIG) would reach only the
server's own process, not the Python daemon a Spark JVM forks, and fires
when the thread that started the server ends, not the process. Runs as a
script with the standard library only, in a session of its own, so a
terminal's Ctrl-C or a signal to the test's process group does not end it
first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

GRACE_SECONDS = 3.0


def started(pid: int) -> str:
    """When process `pid` started (clock ticks since boot), or "-" if there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return "-"


def _ours(pgid: int, pid: int, start: str) -> bool:
    """Whether process `pid`, started at `start`, still runs in process group `pgid`."""
    try:
        return started(pid) == start and os.getpgid(pid) == pgid
    except ProcessLookupError:
        return False


def _end(groups: dict[int, tuple[int, str]]) -> None:
    mine = [pgid for pgid, (pid, start) in groups.items() if _ours(pgid, pid, start)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in mine:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        if sig == signal.SIGTERM and mine:
            time.sleep(GRACE_SECONDS)


def main() -> None:
    groups: dict[int, tuple[int, str]] = {}
    for line in sys.stdin:
        word, *main_process = line.split()
        if word.startswith("+"):
            pid, start = main_process
            groups[int(word[1:])] = (int(pid), start)
        elif word.startswith("-"):
            groups.pop(int(word[1:]), None)
    _end(groups)


if __name__ == "__main__":
    main()
