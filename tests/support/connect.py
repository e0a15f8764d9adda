"""A Spark Connect server for tests: pyspark's own, started on 127.0.0.1 and stopped by PID.

One JVM start (15-60 s on a busy 2-core machine) is the cost, so the session
fixture `connect_server` shares one server across the tests, as `spark`
shares one classic session; a test that kills its server starts its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from memwal_core.connect_server import ConnectServer
from tests.support.service import end_group, watch_group

# Two cores, a failed task retried once: the shape of the shared classic session.
TEST_MASTER = "local[2,2]"
TEST_CONF = {"spark.sql.shuffle.partitions": "4"}


def _watch_once_up(server: ConnectServer, groups: list[int], finished: threading.Event) -> None:
    """Hand the server's process group (its JVM and the Python daemon it forks) to the watchdog as soon
    as its pid file names it, during the start-up and warm-up that take most of a minute."""
    while not finished.wait(0.1):
        pid = server.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                groups.append(os.getpgid(pid))
                watch_group(pid)
            return


@contextlib.contextmanager
def started_connect_server(home: Path) -> Iterator[ConnectServer]:
    """A running server whose files live in `home`; stopped (by PID, then its group) when the block ends."""
    server = ConnectServer(home)
    groups: list[int] = []
    finished = threading.Event()
    watcher = threading.Thread(target=_watch_once_up, args=(server, groups, finished), daemon=True)
    watcher.start()
    try:
        server.start(master=TEST_MASTER, conf=TEST_CONF)
        yield server
    finally:
        finished.set()
        watcher.join()
        server.stop()
        for pgid in groups:
            end_group(pgid)
