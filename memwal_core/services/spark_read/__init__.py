"""MemWAL-aware reads in Spark: the `memwal` PySpark data source (docs/spark-read.md).

Registering imports PySpark; importing this package does not, so executors
and the CLI that load `memwal_core` never pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memwal_core.errors import BadInputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark refuses a Python data source whose reader takes filters unless this is on (off by default).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register_spark_source(spark: SparkSession) -> None:
    """Make `spark.read.format("memwal")` available in `spark`, a classic or a Spark Connect session.

    The source prunes with the filters Spark pushes to it (primary-key `=`,
    `IN` and ranges skip regions, generations and base fragments), and Spark
    only hands a Python data source its filters, and accepts one that takes
    them, with `spark.sql.python.filterPushdown.enabled` on: registering turns
    it on for the session.

    >>> register_spark_source(spark)  # doctest: +SKIP
    >>> spark.read.format("memwal").load("s3://bucket/events").where("id = 42").show()  # doctest: +SKIP
    """
    registry: Any = getattr(spark, "dataSource", None)
    if not callable(getattr(registry, "register", None)) or not hasattr(spark, "conf"):
        raise BadInputError(
            f"register_spark_source() argument spark must be a SparkSession (classic or Connect), "
            f"not {type(spark).__name__}"
        )
    from memwal_core.services.spark_read.source import MemWalDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    registry.register(MemWalDataSource)
