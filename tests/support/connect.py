"""A Spark Connect server for tests: pyspark's own, started on 127.0.0.1 and stopped by PID.

One JVM start (15-60 s on a busy 2-core machine) is the cost, so the session
fixture `connect_server` shares one server across the tests, as `spark`
shares one classic session; a test that kills its server starts its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from memwal_core.connect_server import ConnectServer

# Two cores, a failed task retried once: the shape of the shared classic session.
TEST_MASTER = "local[2,2]"


@contextlib.contextmanager
def started_connect_server(home: Path) -> Iterator[ConnectServer]:
    """A running server whose files live in `home`; stopped (by PID) when the block ends."""
    server = ConnectServer(home)
    server.start(master=TEST_MASTER, conf={"spark.sql.shuffle.partitions": "4"})
    try:
        yield server
    finally:
        server.stop()
