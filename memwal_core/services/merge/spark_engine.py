"""The `spark` merge engine: executors read generations, Spark collapses.

One Spark task per flushed generation reads it with pylance inside
`mapInArrow` (lance is imported on the executor) and tags every row with a
sequence number, (generation ordinal << 40) + row, so "newest wins" is a max.
Spark keeps the newest row per primary key; the driver collects the result
(the commit's hash join needs the whole source anyway) and splits deletes
from upserts exactly as the local engine does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal_core.services.merge.collapse import TOMBSTONE, Collapsed, split
from memwal_core.services.merge.plan import RegionMergePlan
from memwal_core.spark_session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SEQ = "__memwal_seq"
ROW_BITS = 40


def _reader(
    storage_options: dict[str, str], arrow_schema: pa.Schema, region: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor-side function: read each assigned generation, tag rows, yield batches."""

    def read(sources: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import lance
        import numpy as np

        for batch in sources:
            for ordinal, generation, uri in zip(
                batch.column("ordinal").to_pylist(),
                batch.column("generation").to_pylist(),
                batch.column("uri").to_pylist(),
                strict=True,
            ):
                try:
                    dataset = lance.dataset(uri, storage_options=storage_options or None)
                except (ValueError, OSError) as exc:
                    raise OSError(
                        f"region {region}: flushed generation {generation} at {uri} cannot be read"
                    ) from exc
                offset = 0
                for rows in dataset.to_batches():
                    seq = (np.int64(ordinal) << ROW_BITS) + np.arange(
                        offset, offset + rows.num_rows, dtype=np.int64
                    )
                    offset += rows.num_rows
                    arrays = [rows.column(f.name).cast(f.type) for f in arrow_schema if f.name != SEQ]
                    yield pa.RecordBatch.from_arrays([*arrays, pa.array(seq)], schema=arrow_schema)

    return read


class SparkEngine:
    """Collapses on Spark: local[*] by default, or any master (standalone, cluster)."""

    name = "spark"

    def __init__(self, spark: SparkSession | None = None, *, master: str | None = None) -> None:
        self._spark = spark
        self._master = master

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = spark_session(self._master)
        return self._spark

    def collapse(
        self,
        plan: RegionMergePlan,
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> Collapsed:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        read_schema = pa.schema(
            [
                *(pa.field(f.name, f.type) for f in base_schema),
                pa.field(TOMBSTONE, pa.bool_()),
                pa.field(SEQ, pa.int64()),
            ]
        )
        spark_schema = from_arrow_schema(read_schema)
        wire_schema = to_arrow_schema(spark_schema)
        sources = self.spark.createDataFrame(
            [(i, g.generation, g.uri) for i, g in enumerate(plan.generations)],
            "ordinal long, generation long, uri string",
        ).repartition(len(plan.generations))
        rows = sources.mapInArrow(_reader(dict(storage_options), wire_schema, plan.region), spark_schema)

        payload = [c for c in read_schema.names if c not in primary_key]
        newest = rows.groupBy(*primary_key).agg(F.max(F.struct(SEQ, *payload)).alias("w"))
        winners = newest.select(*primary_key, *(F.col(f"w.{c}").alias(c) for c in payload if c != SEQ))
        collected = winners.toArrow()
        what = f"region {plan.region} generations {plan.generations[0].generation}..{plan.generations[-1].generation}"
        live, deleted = split(collected, primary_key, base_schema, what=what, cast=True)
        return Collapsed(
            live=live,
            deleted_keys=deleted,
            rows_read=sum(g.physical_rows or 0 for g in plan.generations),
            bytes_read=sum(g.in_memory_bytes or 0 for g in plan.generations),
        )
