"""Ingestion on Spark: executors read and route the sources, then each region is written by one task.

Stage 1 (one task per file): read with pyarrow, conform to the table schema,
split by region value (Lance's routing, `model/routing.py`) and stage each
part as a Lance file under `_memwal_staging/` in the table's storage; only
paths and counts go back to the driver. Every file is read and checked
before anything is written. Stage 2 (one task per region): read the region's
staged parts in file order and stream them through `MemWalWriter`. A retried
task opens a new writer, whose claim fences the failed attempt, and re-puts
its rows; puts are upserts, so the final rows are the same.

Why staging rather than a Spark repartition: carrying the rows through the
JVM (persist, shuffle, Arrow both ways) cost 3-5x the writes themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from memwal_core.errors import BadInputError, MemwalError
from memwal_core.model.routing import region_spec_of
from memwal_core.services.ingest.sources import SourceFiles
from memwal_core.services.staging import STAGING_DIR, stage, unstage_batches
from memwal_core.services.writer import MemWalWriter, WriterOptions
from memwal_core.spark_session import executor_error, executor_memwal_error, spark_session
from memwal_core.storage.limits import with_lance_defaults
from memwal_core.storage.object_store import absolute_uri
from memwal_core.table import MemWalTable

if TYPE_CHECKING:
    from memwal_core.services.ingest.service import IngestCounts

# What the tasks return: as Spark declares it, and as the task builds it.
STAGED_SCHEMA = "file long, region binary, path string, rows long"
STAGED_ARROW = pa.schema(
    [("file", pa.int64()), ("region", pa.binary()), ("path", pa.string()), ("rows", pa.int64())]
)
RESULT_SCHEMA = "region string, rows long"
RESULT_ARROW = pa.schema([("region", pa.string()), ("rows", pa.int64())])
T = TypeVar("T")


class SparkIngestError(MemwalError):
    """The Spark ingestion job failed (the executor's message)."""


def _stage_files(
    sources: SourceFiles, schema: pa.Schema, uri: str, options: Mapping[str, str], staging: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Stage 1 task: (file index, path) in; one staged part per file batch and region value out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import lance

        from memwal_core.model.routing import partition_by_code

        spec = region_spec_of(lance.dataset(uri, storage_options=with_lance_defaults(options)))
        if spec is None:
            raise BadInputError(f"table {uri} has manually managed regions")
        for batch in batches:
            for index, path in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                staged = []
                for rows in sources.read(path, schema):
                    codes, keys = spec.route(rows)
                    for key, part in zip(keys, partition_by_code(rows, codes, len(keys)), strict=True):
                        if part is not None:
                            target = f"{staging}/{uuid.uuid4().hex}.lance"
                            staged.append(
                                {
                                    "file": index,
                                    "region": repr(key).encode(),
                                    "path": stage(target, part, options),
                                    "rows": part.num_rows,
                                }
                            )
                yield pa.RecordBatch.from_pylist(staged, schema=STAGED_ARROW)

    return run


def _write_regions(
    uri: str, options: Mapping[str, str], writer_options: WriterOptions
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Stage 2 task: a region's staged parts (in file order) in, written, rows per region out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        paths = [p for batch in batches for group in batch.column(0).to_pylist() for p in group]
        if not paths:
            return
        with MemWalWriter(uri, dict(options), options=writer_options) as writer:
            writer.put_all(batch for path in paths for batch in unstage_batches(path, options))
        yield pa.RecordBatch.from_pylist(
            [{"region": r, "rows": int(s["rows_put"])} for r, s in writer.stats().items()],
            schema=RESULT_ARROW,
        )

    return run


def write_spark(
    table: MemWalTable,
    sources: SourceFiles,
    writer_options: WriterOptions,
    result: IngestCounts,
    *,
    master: str | None = None,
) -> None:
    """Run both stages on Spark and fill `result`; the staged parts are removed either way."""
    uri = absolute_uri(table.uri)
    options = table.storage_options.as_dict()
    schema = table.schema
    spark = spark_session(master)
    run_dir = f"{STAGING_DIR}/ingest-{uuid.uuid4().hex}"
    staging = f"{uri}/{run_dir}"
    tasks = max(1, min(len(sources.files), spark.sparkContext.defaultParallelism * 2))
    files = spark.createDataFrame(list(enumerate(sources.files)), "file long, path string").repartition(tasks)
    try:
        spark.sparkContext.setJobDescription(f"memwal ingest: read {len(sources.files)} file(s)")
        staged = _run(
            lambda: (
                files.mapInArrow(_stage_files(sources, schema, uri, options, staging), STAGED_SCHEMA)
                .toArrow()
                .to_pylist()
            )
        )
        result.rows_read = sum(s["rows"] for s in staged)
        if result.rows_read == 0:
            raise BadInputError(f"the sources hold no rows ({len(sources.files)} file(s))")
        by_region: dict[bytes, list[str]] = {}
        for part in sorted(staged, key=lambda s: s["file"]):  # file order: a later file's row wins
            by_region.setdefault(part["region"], []).append(part["path"])
        spark.sparkContext.setJobDescription(f"memwal ingest: write {len(by_region)} region(s)")
        # One region per task: parallelize slices a list evenly, one element per slice here.
        groups = spark.sparkContext.parallelize([(paths,) for paths in by_region.values()], len(by_region))
        written = spark.createDataFrame(groups, "paths array<string>")
        rows = _run(
            lambda: (
                written.mapInArrow(_write_regions(uri, options, writer_options), RESULT_SCHEMA)
                .toArrow()
                .to_pylist()
            )
        )
        for row in rows:
            result.regions[row["region"]] = result.regions.get(row["region"], 0) + row["rows"]
        result.rows_written = sum(result.regions.values())
    finally:
        table.store.delete_tree(run_dir)


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
