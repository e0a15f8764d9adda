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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal_core.errors import CorruptMetadataError
from memwal_core.services.merge.collapse import (
    TOMBSTONE,
    collapse_tables,
    plain_keys,
    read_generation,
    shared_key,
    with_region,
)
from memwal_core.services.merge.plan import GenerationSource
from memwal_core.services.spark_read.plan import ReadSlice, SourcePlan
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.options import StorageOptions

if TYPE_CHECKING:
    import lance
    import numpy as np
    import pandas as pd

# Rows per Arrow batch handed to Spark (Lance's default is 8,192; fewer, larger batches cost Spark less).
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class PendingKeys:
    """Every key the plan's pending generations hold, written or deleted: base rows with one are stale."""

    primary_key: tuple[str, ...]
    index: pd.Index

    def current(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of a base batch that no pending generation overrides."""
        import pandas as pd

        columns = [batch.column(k).to_numpy(zero_copy_only=False) for k in self.primary_key]
        probe = columns[0] if len(columns) == 1 else pd.MultiIndex.from_arrays(columns)
        kept: np.ndarray = self.index.get_indexer(probe) < 0
        return batch if kept.all() else batch.filter(pa.array(kept))


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's reading threads (made on first use, so a forked worker makes its own)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="memwal-read")


def _read(
    plan: SourcePlan, regions: Sequence[str], storage: StorageOptions, columns: Sequence[str]
) -> dict[str, list[pa.Table]]:
    """`columns` of the rows of every pending generation of `regions` that match the plan's key filter,
    per region in ascending generation order; generations are read in parallel."""
    sources = [
        (region, GenerationSource(g, plan.generation_uri(region, path)))
        for region in regions
        for g, path in plan.region(region).generations
    ]
    options = storage.as_dict()

    def read(source: tuple[str, GenerationSource]) -> pa.Table:
        return read_generation(source[1], source[0], options, columns=columns, where=plan.where)

    by_region: dict[str, list[pa.Table]] = {region: [] for region in regions}
    for (region, _source), table in zip(
        sources, _pool(storage.max_concurrent_requests()).map(read, sources), strict=True
    ):
        by_region[region].append(table)
    return by_region


@functools.lru_cache(maxsize=1)
def pending_keys(plan: SourcePlan, storage: StorageOptions) -> PendingKeys:
    """The keys of every pending generation of the plan (matching its key filter), read once per process.

    Each task of the read needs the same set; a Python worker runs many tasks, so it reads the
    generations' key columns once. A key held by two regions is refused: which of their rows is
    newer is not defined, so no answer would be right.
    """
    import pandas as pd

    read = _read(plan, [r.region for r in plan.regions], storage, plan.primary_key)
    distinct = {
        region: pa.concat_tables(plain_keys(t, plan.primary_key) for t in tables)
        .group_by(list(plan.primary_key))
        .aggregate([])
        for region, tables in read.items()
    }
    keys = pa.concat_tables(distinct.values())
    columns = [keys.column(k).to_numpy() for k in plan.primary_key]
    index = pd.Index(columns[0]) if len(columns) == 1 else pd.MultiIndex.from_arrays(columns)
    if not index.is_unique:  # each region's keys are distinct, so a key repeats across regions
        raise _shared_key_error(distinct, plan.primary_key)
    return PendingKeys(plan.primary_key, index)


def _shared_key_error(distinct: dict[str, pa.Table], primary_key: tuple[str, ...]) -> CorruptMetadataError:
    shared = shared_key(pa.concat_tables(with_region(t, r) for r, t in distinct.items()), primary_key)
    assert shared is not None, "a key repeats across regions"
    key, regions = shared
    shown = key[0] if len(key) == 1 else key
    return CorruptMetadataError(
        f"regions {', '.join(regions)} all hold primary key {shown!r} in pending generations; regions must "
        "never share keys, so which row is newest is not defined (read refused)"
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
    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in output], schema=output)
