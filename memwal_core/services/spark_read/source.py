"""The `memwal` PySpark data source: a MemWAL-aware read of a Lance table, from a classic or a Connect session.

Spark runs every method here in its own Python workers, never in the
caller's process (on Spark Connect, the server's): `schema()` when the
DataFrame is made, then the reader's planning (`__init__`, `partitions()`)
in one worker on the driver and `read()` in each task. The reader is pickled
before `partitions()` is called, so the snapshot is fixed in `__init__`;
`partitions()` only cuts it.

Spark keeps what that planning returns on the DataFrame (the relation of one
`load()`) and reuses it for every later query of it, so a DataFrame reads one
snapshot, fixed by its first query. The reader therefore takes no filters
from Spark: Spark 4.3 would reuse a plan narrowed to one query's filters for
the DataFrame's next query without filters (docs/spark-read.md#filters).

Storage options (credentials among them) live in the reader, never in a
partition: partitions are shown in Spark's logs and errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from memwal_core.model.table import MemWalTable
from memwal_core.services.spark_read.options import SourceOptions
from memwal_core.services.spark_read.plan import ReadSlice, plan_source, slices
from memwal_core.services.spark_read.rows import read_slice

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

SOURCE_NAME = "memwal"


class MemWalDataSource(DataSource):
    """`spark.read.format("memwal").options(**storage_options).load(uri)`: base table plus pending generations."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The table's columns (or the `columns` option's), as Spark types: a vector becomes an array."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        from memwal_core.errors import BadInputError, SchemaError

        options = SourceOptions.parse(self.options)
        with MemWalTable.open(options.uri, options.storage) as table:
            arrow = table.dataset(options.version).schema
        names = options.columns or tuple(arrow.names)
        missing = [n for n in names if n not in arrow.names]
        if missing:
            raise BadInputError(f"table {options.uri} has no column {missing[0]!r}")
        chosen = pa.schema([arrow.field(n) for n in names])
        try:
            return from_arrow_schema(chosen, prefer_timestamp_ntz=True)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"table {options.uri} has a column Spark cannot read ({exc})") from None

    def reader(self, schema: StructType) -> DataSourceReader:
        return MemWalReader(SourceOptions.parse(self.options), schema)


class MemWalReader(DataSourceReader):
    """A DataFrame's read: the snapshot fixed when Spark plans its first query, its keys chosen by options."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.storage = options.storage
        self.output: pa.Schema = to_arrow_schema(schema, timezone="UTC")
        self.plan = plan_source(options, schema.fieldNames())

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(part) for part in slices(self.plan)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        if not isinstance(part, ReadSlice):  # Spark's one empty partition when there is nothing to read
            return iter(())
        return read_slice(self.plan, part, self.storage, self.output)
