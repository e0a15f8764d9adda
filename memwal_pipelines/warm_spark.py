"""The embedded default's warm Spark: pyspark's own Spark Connect server, its files in DAGSTER_HOME.

A classic SparkSession would cost every Dagster run a JVM start; runs that
connect to a Connect server pay nothing of it. `warm_spark` gives a command
(`python -m memwal_pipelines spark`, for `dg dev`) one: the live server a
former command left in DAGSTER_HOME, reused, or one started here on
127.0.0.1 and stopped when the command ends. Runs find it through
MEMWAL_SPARK_REMOTE, which `warm_spark` sets for this process and its
children, or, started by `dg dev`, in DAGSTER_HOME (`live_warm_remote`).
MEMWAL_SPARK_REMOTE or MEMWAL_SPARK_MASTER set by the user wins: no server
is started then.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from memwal_core.connect_server import ConnectServer
from memwal_core.spark_session import MASTER_ENV, REMOTE_ENV

# Beside the instance's own files in DAGSTER_HOME.
WARM_DIR = ".memwal-spark"


def warm_home(dagster_home: str | os.PathLike[str]) -> Path:
    return Path(dagster_home) / WARM_DIR


def live_warm_remote() -> str | None:
    """The URL of the warm server a command left running in DAGSTER_HOME, if one lives."""
    home = os.environ.get("DAGSTER_HOME")
    server = ConnectServer.find(warm_home(home)) if home else None
    return server.url if server is not None else None


@contextlib.contextmanager
def warm_spark(dagster_home: str | os.PathLike[str]) -> Iterator[str | None]:
    """The Connect server this command's runs use (None: the user named a Spark); stopped here if started here."""
    if os.environ.get(REMOTE_ENV) or os.environ.get(MASTER_ENV):
        yield os.environ.get(REMOTE_ENV)
        return
    home = warm_home(dagster_home)
    server = ConnectServer.find(home)
    started = None
    if server is None:
        home.mkdir(parents=True, exist_ok=True)
        server = started = ConnectServer(home)
        server.start()
    os.environ[REMOTE_ENV] = server.url
    try:
        yield server.url
    finally:
        os.environ.pop(REMOTE_ENV, None)
        if started is not None:
            started.stop()
