"""The SparkSession memwal's Spark engine (`services/engine.py`) starts when none is injected.

The master is configuration: `local[*,2]` by default, MEMWAL_SPARK_MASTER or an
explicit URL (a standalone `spark://host:port`) to scale out. Executors run
this interpreter, so they import the same pylance.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from memwal_core.errors import MemwalError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Local mode retries a failed task once (local[N,F]); plain local[*] would not retry at all.
DEFAULT_MASTER = "local[*,2]"
LOOPBACK = "127.0.0.1"


def spark_conf(master: str | None = None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings for a memwal SparkSession: Arrow on, this interpreter on executors, a local driver on loopback.

    Shared by `spark_session` and the Dagster Spark resource, so both build the same session.
    """
    master = master or os.environ.get("MEMWAL_SPARK_MASTER") or DEFAULT_MASTER
    settings = {
        "spark.master": master,
        "spark.app.name": "memwal",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": os.environ.get("MEMWAL_SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        settings["spark.driver.host"] = LOOPBACK
        settings["spark.driver.bindAddress"] = LOOPBACK
    return {**settings, **(conf or {})}


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active SparkSession, or a new one for `master` (bound to loopback when local)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(master, conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def executor_error(exc: Exception) -> str:
    """The most telling line of a Spark failure: how the task's own exception begins (`Type: message`).

    Spark wraps it in the worker's traceback (and Java frames); its first line
    follows the traceback's last frame. Without a traceback, the last line stands.
    """
    lines = str(exc).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = lines[frames[-1] + 1 :] if frames else []
    raised = next((line for line in after if line.strip() and not line[0].isspace()), None)
    stated = [line.strip() for line in lines if line.strip()]
    return first_line(raised or (stated or [type(exc).__name__])[-1])


def executor_memwal_error(exc: Exception) -> MemwalError | None:
    """The memwal error an executor raised, rebuilt on the driver (so bad input still exits 2)."""
    from memwal_core import errors

    for line in reversed(str(exc).splitlines()):
        name, sep, message = line.strip().partition(": ")
        if sep and name.startswith("memwal_core.errors."):
            cls = getattr(errors, name.rsplit(".", 1)[-1], None)
            if isinstance(cls, type) and issubclass(cls, MemwalError):
                return cls(message)
    return None
