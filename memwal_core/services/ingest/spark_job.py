"""Ingestion on Spark: executors read and route the sources, then each region is written by one task.

Stage 1 (one task per file): read with pyarrow, conform to the table schema,
and tag each row with its region value (Lance's routing, `model/routing.py`).
Its output is persisted and counted, so every file is read and checked before
anything is written. Stage 2: repartition by region value, so every region's
rows land in exactly one task, which streams them through `MemWalWriter`. A
retried task opens a new writer, whose claim fences the failed attempt, and
re-puts its rows; puts are upserts, so the final rows are the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from memwal_core.errors import BadInputError, MemwalError
from memwal_core.model.routing import region_spec_of
from memwal_core.services.ingest.sources import SourceFiles
from memwal_core.services.writer import MemWalWriter, WriterOptions
from memwal_core.spark_session import executor_error, executor_memwal_error, spark_session
from memwal_core.storage.object_store import absolute_uri
from memwal_core.table import MemWalTable

if TYPE_CHECKING:
    from memwal_core.services.ingest.service import IngestResult

REGION_COLUMN = "_memwal_region"
RESULT_SCHEMA = "region string, rows long"
T = TypeVar("T")


class SparkIngestError(MemwalError):
    """The Spark ingestion job failed (the executor's message)."""


def _route_files(
    sources: SourceFiles, schema: pa.Schema, uri: str, options: Mapping[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Stage 1 task: file paths in, conformed rows tagged with their region value out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import lance

        spec = region_spec_of(lance.dataset(uri, storage_options=dict(options) or None))
        for batch in batches:
            for path in batch.column(0).to_pylist():
                for rows in sources.read(path, schema):
                    if spec is None:
                        tags = pa.array([b""] * rows.num_rows, pa.binary())
                    else:
                        codes, keys = spec.route(rows)
                        tags = pa.array([repr(k).encode() for k in keys], pa.binary()).take(pa.array(codes))
                    yield from rows.append_column(REGION_COLUMN, tags).to_batches()

    return run


def _write_regions(
    uri: str, options: Mapping[str, str], writer_options: WriterOptions
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Stage 2 task: one or more whole regions in, written, rows per region out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:  # hash partitioning left this task no region
            return
        with MemWalWriter(uri, dict(options), options=writer_options) as writer:
            pending: list[pa.Table] = []
            pending_rows = 0
            for batch in itertools.chain([first], batches):
                pending.append(pa.Table.from_batches([batch]).drop_columns([REGION_COLUMN]))
                pending_rows += batch.num_rows
                if pending_rows >= writer.chunk_rows:
                    writer.put(pa.concat_tables(pending))
                    pending, pending_rows = [], 0
            if pending:
                writer.put(pa.concat_tables(pending))
        yield pa.RecordBatch.from_pylist(
            [{"region": r, "rows": int(s["rows_put"])} for r, s in writer.stats().items()],
            schema=pa.schema([("region", pa.string()), ("rows", pa.int64())]),
        )

    return run


def write_spark(
    table: MemWalTable,
    sources: SourceFiles,
    writer_options: WriterOptions,
    result: IngestResult,
    *,
    master: str | None = None,
) -> None:
    """Run both stages on Spark and fill `result`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    uri = absolute_uri(table.uri)
    options = table.storage_options.as_dict()
    schema = table.schema
    spark = spark_session(master)
    routed_schema = pa.schema([*schema, pa.field(REGION_COLUMN, pa.binary())])
    try:
        spark_schema = from_arrow_schema(routed_schema)
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"table {table.uri}: Spark cannot carry its schema ({exc})") from None
    files = spark.createDataFrame([(p,) for p in sources.files], "path string").repartition(
        max(1, min(len(sources.files), spark.sparkContext.defaultParallelism))
    )
    spark.sparkContext.setJobDescription(f"memwal ingest: read {len(sources.files)} file(s)")
    routed = files.mapInArrow(_route_files(sources, schema, uri, options), spark_schema).persist()
    try:
        result.rows_read = _run(lambda: routed.count())
        if result.rows_read == 0:
            raise BadInputError(f"the sources hold no rows ({len(sources.files)} file(s))")
        regions = routed.select(REGION_COLUMN).distinct().count()
        spark.sparkContext.setJobDescription(f"memwal ingest: write {regions} region(s)")
        written = routed.repartition(regions, REGION_COLUMN).mapInArrow(
            _write_regions(uri, options, writer_options), RESULT_SCHEMA
        )
        for row in _run(lambda: written.toArrow().to_pylist()):
            result.regions[row["region"]] = result.regions.get(row["region"], 0) + row["rows"]
        result.rows_written = sum(result.regions.values())
    finally:
        routed.unpersist()


def _run(job: Callable[[], T]) -> T:
    """Run a Spark action; an executor's memwal error comes back as itself."""
    try:
        return job()
    except MemwalError:
        raise
    except Exception as exc:  # Py4J/PySpark errors wrap the executor's traceback
        raise executor_memwal_error(exc) or SparkIngestError(
            f"Spark ingestion failed: {executor_error(exc)}"
        ) from exc
