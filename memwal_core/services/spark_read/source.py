"""The `memwal` PySpark data source: a MemWAL-aware read of a Lance table, from a classic or a Connect session.

Spark runs every method here in its own Python workers, never in the
caller's process (on Spark Connect, the server's): the data source is made
(`__init__`, then `schema()`) when Spark resolves `load()`, pickled, and kept
on the DataFrame's relation; every planning of a query then unpickles that
instance to make a reader (`reader()`, `partitions()`), and `read()` runs in
each task.

Spark plans each reference to a relation on its own: both sides of a
self-join, on two threads at once, and again when a query's filters are
pushed. So the snapshot is fixed when the data source is made, and travels
in the pickled instance: every plan of the DataFrame reads that one. A reader
only narrows it to its query's columns and cuts it into partitions. The
reader takes no filters from Spark: Spark 4.3 would reuse a plan narrowed to
one query's filters for the DataFrame's next query without filters
(docs/spark-read.md#filters).

Bad options are refused when the data source is made, in one line naming
the option: Spark shows the Python traceback of the error, so it is raised
from `__init__` itself, without the frames and causes beneath it.

Storage options (credentials among them) live in the data source and the
reader, never in a partition: partitions are shown in Spark's logs and errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from memwal_core.errors import MemwalError, SchemaError
from memwal_core.services.spark_read.options import SourceOptions
from memwal_core.services.spark_read.plan import ReadSlice, SourcePlan, plan_source, slices
from memwal_core.services.spark_read.rows import read_slice
from memwal_core.storage.options import StorageOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

SOURCE_NAME = "memwal"


class MemWalDataSource(DataSource):
    """`spark.read.format("memwal").options(**storage_options).load(uri)`: base table plus pending generations."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        try:
            parsed = SourceOptions.parse(options)
            self.storage: StorageOptions = parsed.storage
            self.plan: SourcePlan = plan_source(parsed)
        except MemwalError as exc:  # one line under one frame in Spark's error (module docstring)
            raise exc.with_traceback(None) from None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The columns the read returns, as Spark types: a vector becomes an array."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        chosen = pa.schema([self.plan.schema.field(c) for c in self.plan.columns])
        try:
            return from_arrow_schema(chosen, prefer_timestamp_ntz=True)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"table {self.plan.table_uri} has a column Spark cannot read ({exc})") from None

    def reader(self, schema: StructType) -> DataSourceReader:
        return MemWalReader(self.plan, self.storage, schema)


class MemWalReader(DataSourceReader):
    """One planning of a query: the DataFrame's snapshot, narrowed to the query's columns."""

    def __init__(self, plan: SourcePlan, storage: StorageOptions, schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.storage = storage
        self.output: pa.Schema = to_arrow_schema(schema, timezone="UTC")
        self.plan = plan.reading(schema.fieldNames())

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(part) for part in slices(self.plan)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        if not isinstance(part, ReadSlice):  # Spark's one empty partition when there is nothing to read
            return iter(())
        return read_slice(self.plan, part, self.storage, self.output)
