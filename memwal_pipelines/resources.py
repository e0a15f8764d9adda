"""Dagster resources: a MemWAL table (storage options from the environment) and a lazy SparkSession."""

import json
import os

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource

from memwal_core.errors import BadInputError
from memwal_core.spark_session import spark_conf
from memwal_core.storage.options import StorageOptions
from memwal_core.table import MemWalTable
from memwal_pipelines.config import TableConfig


class MemWalTableResource(ConfigurableResource):  # type: ignore[type-arg]
    """A MemWAL table by URI.

    Storage options come from an environment variable holding a JSON object
    (`storage_options_env`), so credentials never enter run config, logs or
    metadata.
    """

    uri: str
    storage_options_env: str | None = None

    def storage_options(self) -> StorageOptions:
        if not self.storage_options_env:
            return StorageOptions()
        raw = os.environ.get(self.storage_options_env, "")
        try:
            return StorageOptions.checked(json.loads(raw) if raw else {})
        except ValueError:
            raise BadInputError(f"{self.storage_options_env} does not hold a JSON object") from None

    def open(self) -> MemWalTable:
        return MemWalTable.open(self.uri, self.storage_options())


def table_resource(table: TableConfig) -> MemWalTableResource:
    return MemWalTableResource(uri=table.uri, storage_options_env=table.storage_options_env)


def spark_resource(table: TableConfig) -> LazyPySparkResource:
    """Dagster's lazy PySpark resource with memwal's settings: no session until a Spark merge asks."""
    return LazyPySparkResource(spark_config=spark_conf(table.spark_master, {"spark.ui.enabled": "false"}))
