"""The code location's one Dagster resource: the pipeline's Spark, and how runs open their table.

Dagster injects it by parameter (`memwal: MemWalResource`) into every asset,
asset check, op and sensor. A resource key means one resource across the
whole location, and each table's definitions come from a component of their
own, so the resource knows no table: every asset, check, op and sensor is
built for one table (`TableConfig`) and hands it to the resource.

Storage options come from each table's environment variable (a JSON object),
read when the table is opened, in the run's or the sensor's own process:
credentials never enter run config, logs or metadata.

The run's SparkSession comes from dagster-pyspark's `LazyPySparkResource`
(nested in this one as `pyspark`, configured the way Dagster users configure
Spark everywhere: `spark_config`), created only when a run first asks for one
(no session for a local run) and injected into the run's engine (`engine`).
By default its `spark_config` names MEMWAL_SPARK_REMOTE's Spark Connect server
(`spark.remote`), else a classic session on MEMWAL_SPARK_MASTER, built with
memwal's own settings (`memwal_core.spark_session.spark_conf`). A table's own
`spark_master` or `spark_remote` overrides it, through the same function the
`memwal` command uses.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import LazyPySparkResource

from memwal_core.errors import BadInputError
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, SparkEngine, SparkThreshold, SparkWhereItPays, engine_named
from memwal_core.storage.options import StorageOptions
from memwal_pipelines.config import TableConfig
from memwal_pipelines.warm_spark import live_warm_remote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The Spark UI would take a port per run; Dagster shows the run instead.
SPARK_CONF = {"spark.ui.enabled": "false"}
# Dagster 1.13 itself reads its deprecated `InitResourceContext.dagster_run` when it configures a nested
# resource (`pyspark` in `memwal`): nothing memwal calls, and nothing its users can act on.
warnings.filterwarnings(
    "ignore",
    message="InitResourceContext.dagster_run is deprecated",
    category=DeprecationWarning,
    module="dagster._core.execution.context.init",
)


# In `spark_config`: the variable that holds the Connect URL, read when a run builds its session, so a
# token in the URL never enters the config every Dagster view shows.
REMOTE_FROM_ENV = "memwal.spark.remote.env"


def remote_from(variable: str, what: str) -> str:
    """The Spark Connect URL in `variable`, read when a run builds its session; `what` names it in the error."""
    remote = os.environ.get(variable)
    if not remote:
        raise BadInputError(f"{variable} ({what}) is not set")
    return remote


def table_remote(table: TableConfig) -> str | None:
    """The table's own Spark Connect URL, read from its variable at run time if it names one."""
    if not table.spark_remote_env:
        return table.spark_remote
    return remote_from(table.spark_remote_env, "the table's spark_remote_env")


def pipeline_spark_config() -> dict[str, str]:
    """The pipeline's `spark_config`: MEMWAL_SPARK_REMOTE's Connect server (by the variable's name), else
    a classic session on MEMWAL_SPARK_MASTER, else the warm server a command runs in DAGSTER_HOME, else a
    classic local session."""
    from memwal_core.spark_session import REMOTE_ENV, spark_conf, spark_target

    master, remote = spark_target()
    if remote:
        return {REMOTE_FROM_ENV: REMOTE_ENV}
    remote = None if master else live_warm_remote()
    if remote:
        return {"spark.remote": remote}
    return spark_conf(master, SPARK_CONF)


def storage_options(table: TableConfig) -> StorageOptions:
    """The table's storage options, from the JSON object in the environment variable it names."""
    variable = table.storage_options_env
    if not variable:
        return StorageOptions()
    raw = os.environ.get(variable, "")
    try:
        values = json.loads(raw) if raw else {}
    except ValueError:
        values = None
    if not isinstance(values, dict):
        raise BadInputError(f"{variable} does not hold a JSON object")
    return StorageOptions.checked(values)


_SENSOR_TABLES: dict[tuple[str, str], MemWalTable] = {}
_SENSOR_TABLES_LOCK = threading.Lock()


@contextlib.contextmanager
def sensor_table(table: TableConfig) -> Iterator[MemWalTable]:
    """The table a sensor reads, kept open in the code server from one tick to the next.

    Opening a table (its store's connections, Lance's caches) costs
    more than an idle tick's reads, and Dagster would also build the resource on
    every tick: sensors take neither. A tick that fails drops the table, so the
    next one opens it afresh (new credentials, an endpoint back).
    """
    options = storage_options(table).for_service("sensor")
    key = (table.uri, json.dumps(options.as_dict(), sort_keys=True))
    with _SENSOR_TABLES_LOCK:
        opened = _SENSOR_TABLES.get(key)
        if opened is None:
            opened = _SENSOR_TABLES[key] = MemWalTable.open(table.uri, options)
    try:
        yield opened
    except BaseException:
        with _SENSOR_TABLES_LOCK:
            if _SENSOR_TABLES.pop(key, None) is opened:
                opened.close()
        raise


class PipelineSparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy resource, its session built the way the `memwal` command builds one.

    `spark.remote` in `spark_config` gives a Spark Connect session of its own
    (bounded retries, and no process-wide Connect mode, so a classic session
    may live beside it); otherwise a classic session with these settings.
    """

    def _init_session(self) -> None:
        from memwal_core.spark_session import spark_session

        if self._spark_session is None:
            config = {key: str(value) for key, value in self.spark_config.items()}
            remote = config.pop("spark.remote", None)
            variable = config.pop(REMOTE_FROM_ENV, None)
            if variable:
                remote = remote_from(variable, "the pipeline's Spark Connect server")
            self._spark_session = spark_session(config.get("spark.master"), config, remote=remote)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Leave the run's Connect session (a shared one stays up for the next run, warm); a classic one is
        the process's."""
        from memwal_core.spark_session import end_session

        if self._spark_session is not None:
            end_session(self._spark_session)
            self._spark_session = None


class MemWalResource(ConfigurableResource):  # type: ignore[type-arg]
    """The pipeline's Spark, and how a run opens its table: every asset is built for one table and passes it."""

    pyspark: PipelineSparkResource

    def storage_options(self, table: TableConfig) -> StorageOptions:
        return storage_options(table)

    def open(self, table: TableConfig, service: str) -> MemWalTable:
        """`table`, its requests named as `service`'s (the User-Agent: StorageOptions.for_service)."""
        return MemWalTable.open(table.uri, storage_options(table).for_service(service))

    def spark_session(self, table: TableConfig) -> SparkSession:
        """The run's SparkSession for `table`: on the table's own Spark if it names one, else the pipeline's."""
        from memwal_core.spark_session import spark_session

        remote = table_remote(table)
        if table.spark_master or remote:
            return spark_session(table.spark_master, SPARK_CONF, remote=remote)
        session: SparkSession = self.pyspark.spark_session
        return session

    def engine(self, table: TableConfig, kind: str) -> Engine:
        """Where a run of `table` does its data work: `kind` "spark" on the run's session for the rounds
        over the table's Spark threshold (the session opens only when one is), else local."""
        if kind == "spark":
            return SparkWhereItPays(
                SparkEngine(open_session=lambda: self.spark_session(table)),
                SparkThreshold(min_rows=table.spark_min_rows, min_bytes=table.spark_min_bytes),
            )
        return engine_named(kind)


def memwal_resource(pyspark: PipelineSparkResource | None = None) -> MemWalResource:
    """The resource every table's definitions use; `pyspark` defaults to `pipeline_spark_config()`'s.

    One object per Spark configuration: Dagster merges the definitions of several tables (one
    component each) only when their `memwal` resource is the very same object.
    """
    if pyspark is not None:
        return MemWalResource(pyspark=pyspark)
    return _shared(tuple(sorted(pipeline_spark_config().items())))


@functools.cache
def _shared(spark_config: tuple[tuple[str, str], ...]) -> MemWalResource:
    return MemWalResource(pyspark=PipelineSparkResource(spark_config=dict(spark_config)))
