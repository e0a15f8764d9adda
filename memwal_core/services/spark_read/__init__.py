"""MemWAL-aware reads in Spark: the `memwal` PySpark data source (docs/spark-read.md).

Registering imports PySpark; importing this package does not, so executors
and the CLI that load `memwal_core` never pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwal_core.errors import BadInputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register_spark_source(spark: SparkSession) -> None:
    """Make `spark.read.format("memwal")` available in `spark`, a classic or a Spark Connect session.

    >>> register_spark_source(spark)  # doctest: +SKIP
    >>> spark.read.format("memwal").load("s3://bucket/events").where("score > 0.5").show()  # doctest: +SKIP
    >>> spark.read.format("memwal").option("keys", "42,43").load("s3://bucket/events").show()  # doctest: +SKIP
    """
    registry: Any = getattr(spark, "dataSource", None)
    if not callable(getattr(registry, "register", None)):
        raise BadInputError(
            f"register_spark_source() argument spark must be a SparkSession (classic or Connect), "
            f"not {type(spark).__name__}"
        )
    from memwal_core.services.spark_read.source import MemWalDataSource

    registry.register(MemWalDataSource)
