"""What a Spark task of a MemWAL-aware read returns: its slice's rows, as Arrow batches Spark takes as they are.

A slice's base fragments are scanned at the plan's version, without the rows
of keys that any pending generation holds (those keys' newest version, or
their delete, is a region's to return). A slice's regions are each collapsed
to the newest row per key, deletes dropped, by the merge's own collapse. The
executor imports Lance here, inside the task.

Generations are read on one thread pool per process: a Python worker runs
many tasks, and starting threads for every region of every task cost more
than the reads on local disk.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import CorruptMetadataError
from memwal_core.model.evolution import TOMBSTONE
from memwal_core.services.merge.collapse import collapse_tables, read_generation
from memwal_core.services.merge.plan import GenerationSource
from memwal_core.services.spark_read.pending import PendingKeys, pending_keys_of
from memwal_core.services.spark_read.plan import ReadSlice, SourcePlan
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.options import StorageOptions

if TYPE_CHECKING:
    import lance

# Rows per Arrow batch handed to Spark (Lance's default is 8,192; fewer, larger batches cost Spark less).
BATCH_ROWS = 65_536
# Generations read at once from local disk: a read is about 0.5 ms of CPU there, and more threads
# only contend (128 key columns: 0.067 s on 1 thread, 0.099 s on 64). An object store's latency
# wants `max_concurrent_requests` in flight instead.
LOCAL_READ_THREADS = 4


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's reading threads (made on first use, so a forked worker makes its own)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="memwal-read")


def _read(
    plan: SourcePlan, regions: Sequence[str], storage: StorageOptions, columns: Sequence[str]
) -> dict[str, list[pa.Table]]:
    """`columns` of the rows of every pending generation of `regions` that hold a selected key (all
    rows without a selection), per region in ascending generation order; read in parallel."""
    sources = [
        (region, GenerationSource(g, plan.generation_uri(region, path)))
        for region in regions
        for g, path in plan.region(region).generations
    ]
    options = storage.as_dict()

    def read(source: tuple[str, GenerationSource]) -> pa.Table:
        return read_generation(source[1], source[0], options, plan.fields, columns=columns, where=plan.where)

    threads = storage.max_concurrent_requests() if "://" in plan.table_uri else LOCAL_READ_THREADS
    by_region: dict[str, list[pa.Table]] = {region: [] for region in regions}
    for (region, _source), table in zip(sources, _pool(threads).map(read, sources), strict=True):
        by_region[region].append(table)
    return by_region


@functools.lru_cache(maxsize=1)
def pending_keys(plan: SourcePlan, storage: StorageOptions) -> PendingKeys:
    """The keys of every pending generation of the plan (matching its key selection), read once per process.

    Each task of the read that reads base fragments needs the same set; a Python worker runs
    many tasks, so it reads the generations' key columns once.
    """
    return pending_keys_of(
        _read(plan, [r.region for r in plan.regions], storage, plan.primary_key), plan.primary_key
    )


def read_slice(
    plan: SourcePlan, part: ReadSlice, storage: StorageOptions, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows of one slice, as batches of `output` (the Arrow form of Spark's schema for the read)."""
    if part.fragments:
        yield from _base_rows(plan, part, storage, output)
    if part.regions:
        read = _read(plan, part.regions, storage, [*plan.schema.names, TOMBSTONE])
        for region, tables in read.items():
            live, _deleted = collapse_tables(tables, plan.primary_key, plan.schema, what=f"region {region}")
            for batch in live.to_batches(max_chunksize=BATCH_ROWS):
                yield _as_output(batch, output)


def _base_rows(
    plan: SourcePlan, part: ReadSlice, storage: StorageOptions, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    stale = pending_keys(plan, storage) if plan.regions else None
    base = open_dataset(plan.table_uri, storage.as_dict(), version=plan.table_version)
    scanner = base.scanner(
        columns=list(plan.schema.names),
        filter=plan.where,
        fragments=[_fragment(base, plan, f) for f in part.fragments],
        batch_size=BATCH_ROWS,
    )
    for batch in scanner.to_batches():
        if stale is not None:
            batch = stale.current(batch)
        if batch.num_rows:
            yield _as_output(batch, output)


def _fragment(base: lance.LanceDataset, plan: SourcePlan, fragment: int) -> lance.LanceFragment:
    found = base.get_fragment(fragment)
    if found is None:  # the plan listed it at this very version
        raise CorruptMetadataError(
            f"table {plan.table_uri} version {plan.table_version} lost fragment {fragment}"
        )
    return found


def _as_output(batch: pa.RecordBatch, output: pa.Schema) -> pa.RecordBatch:
    """`batch` in the column order and types Spark expects (a vector's fixed-size list becomes a list)."""
    return pa.RecordBatch.from_arrays(
        [_spark_column(batch.column(f.name), f.type) for f in output], schema=output
    )


def _spark_column(column: pa.Array, spark_type: pa.DataType) -> pa.Array:
    """`column` as `spark_type`. Spark holds microseconds: nanosecond timestamps are floored to them, as
    PySpark's own Arrow conversion floors them (`createDataFrame` of an Arrow table); nested in a list
    or a struct they are cut toward zero, which differs only before 1970. Every other cast is safe."""
    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        column = pc.floor_temporal(column, unit="microsecond")
    return pc.cast(column, options=pc.CastOptions(spark_type, allow_time_truncate=True))
