"""The code location's one Dagster resource: every maintained table, opened by name.

Dagster injects it by parameter (`memwal: MemWalResource`) into every asset,
asset check, op and sensor. A resource key means one resource across the
whole location, so there cannot be one typed resource per table under a fixed
parameter name; this one knows every table by its name instead.

Storage options come from each table's environment variable (a JSON object),
read when the table is opened, in the run's or the sensor's own process:
credentials never enter run config, logs or metadata.

Spark sessions are built through `memwal_core.spark_session`, with the
table's `spark_master`, when a run first asks for one (no session for a local
run), and injected into the run's engine (`engine`). Not dagster-pyspark's
`LazyPySparkResource`: it holds one fixed `spark_config` per resource, so
per-table masters would again need one resource key per table, looked up by
string; and `spark_session` is what the `memwal` command uses, so a Dagster
run and a CLI run build the same session (settings, the active session
reused, MEMWAL_SPARK_MASTER read when the run starts rather than when the
definitions load).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dagster import Config, ConfigurableResource

from memwal_core.errors import BadInputError
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, SparkEngine, engine_named
from memwal_core.storage.options import StorageOptions
from memwal_pipelines.config import TableConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The Spark UI would take a port per run; Dagster shows the run instead.
SPARK_CONF = {"spark.ui.enabled": "false"}


class TableLocation(Config):
    """Where one table lives and which Spark master its runs use (never its credentials)."""

    uri: str
    storage_options_env: str | None = None
    spark_master: str | None = None


class MemWalResource(ConfigurableResource):  # type: ignore[type-arg]
    """Every table of the code location, by name (the `name` of the table list)."""

    tables: dict[str, TableLocation]

    def location(self, name: str) -> TableLocation:
        try:
            return self.tables[name]
        except KeyError:
            raise BadInputError(f"the code location maintains no table {name!r}") from None

    def storage_options(self, name: str) -> StorageOptions:
        variable = self.location(name).storage_options_env
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

    def open(self, name: str) -> MemWalTable:
        return MemWalTable.open(self.location(name).uri, self.storage_options(name))

    def spark_session(self, name: str) -> SparkSession:
        """The run's SparkSession for table `name`: the active one, or a new one on the table's master."""
        from memwal_core.spark_session import spark_session

        return spark_session(self.location(name).spark_master, SPARK_CONF)

    def engine(self, name: str, kind: str) -> Engine:
        """Where a run of table `name` does its data work: `kind` "spark" on the run's session, else local."""
        if kind == "spark":
            return SparkEngine(self.spark_session(name))
        return engine_named(kind)


def memwal_resource(tables: Sequence[TableConfig]) -> MemWalResource:
    return MemWalResource(
        tables={
            t.name: TableLocation(
                uri=t.uri, storage_options_env=t.storage_options_env, spark_master=t.spark_master
            )
            for t in tables
        }
    )
