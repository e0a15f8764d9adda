"""What a Spark task of a MemWAL-aware read returns: its slice's rows, as Arrow batches Spark takes as they are.

A slice's base fragments are scanned at the plan's version, without the rows
of keys that any pending generation holds (those keys' newest version, or
their delete, is a region's to return). A slice's regions are each collapsed
to the newest row per key, deletes dropped, exactly as a merge would write
them. The executor imports Lance here, inside the task.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal_core.errors import CorruptMetadataError
from memwal_core.services.merge.collapse import (
    collapse_local,
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

    def current(self, batch: pa.RecordBatch) -> np.ndarray:
        """Which rows of a base batch no pending generation overrides."""
        import pandas as pd

        columns = [batch.column(k).to_numpy(zero_copy_only=False) for k in self.primary_key]
        probe = pd.Index(columns[0]) if len(columns) == 1 else pd.MultiIndex.from_arrays(columns)
        found: np.ndarray = self.index.get_indexer(probe) < 0
        return found


@functools.lru_cache(maxsize=1)
def pending_keys(plan: SourcePlan, storage: StorageOptions) -> PendingKeys:
    """The keys of every pending generation of the plan (matching its key filter), read once per process.

    Each task of the read needs the same set; a Python worker runs many tasks, so it reads the
    generations' key columns once. A key held by two regions is refused: which of their rows is
    newer is not defined, so no answer would be right.
    """
    import pandas as pd

    sources = [
        (r.region, GenerationSource(g, plan.generation_uri(r.region, path)))
        for r in plan.regions
        for g, path in r.generations
    ]
    options = storage.as_dict()

    def keys_of(source: tuple[str, GenerationSource]) -> pa.Table:
        region, generation = source
        return read_generation(generation, region, options, columns=plan.primary_key, where=plan.where)

    with ThreadPoolExecutor(max(1, min(len(sources), storage.max_concurrent_requests()))) as pool:
        tables = list(pool.map(keys_of, sources))
    by_region: dict[str, list[pa.Table]] = {}
    for (region, _generation), table in zip(sources, tables, strict=True):
        by_region.setdefault(region, []).append(plain_keys(table, plan.primary_key))
    distinct = [
        with_region(pa.concat_tables(parts).group_by(list(plan.primary_key)).aggregate([]), region)
        for region, parts in by_region.items()
    ]
    keys = pa.concat_tables(distinct) if distinct else pa.table({})
    shared = shared_key(keys, plan.primary_key)
    if shared is not None:
        key, regions = shared
        raise CorruptMetadataError(
            f"regions {', '.join(regions)} all hold primary key {key[0] if len(key) == 1 else key!r} in pending "
            "generations; regions must never share keys, so which row is newest is not defined (read refused)"
        )
    columns = [keys.column(k).to_numpy() for k in plan.primary_key] if keys.num_rows else []
    if len(plan.primary_key) == 1:
        index: pd.Index = pd.Index(columns[0] if columns else [])
    else:
        index = pd.MultiIndex.from_arrays(columns or [[] for _ in plan.primary_key])
    return PendingKeys(plan.primary_key, index)


def read_slice(
    plan: SourcePlan, part: ReadSlice, storage: StorageOptions, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows of one slice, as batches of `output` (the Arrow form of Spark's schema for the read)."""
    if part.fragments:
        yield from _base_rows(plan, part, storage, output)
    for region in part.regions:
        live = _newest_rows(plan, region, storage)
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
            batch = batch.filter(pa.array(stale.current(batch)))
        if batch.num_rows:
            yield _as_output(batch, output)


def _fragment(base: lance.LanceDataset, plan: SourcePlan, fragment: int) -> lance.LanceFragment:
    found = base.get_fragment(fragment)
    if found is None:  # the plan listed it at this very version
        raise CorruptMetadataError(
            f"table {plan.table_uri} version {plan.table_version} lost fragment {fragment}"
        )
    return found


def _newest_rows(plan: SourcePlan, region: str, storage: StorageOptions) -> pa.Table:
    """A region's pending generations collapsed: the newest row of every key not deleted."""
    sources = [
        GenerationSource(g, plan.generation_uri(region, path)) for g, path in plan.region(region).generations
    ]
    live, _deleted = collapse_local(
        sources, region, plan.primary_key, plan.schema, storage.as_dict(), projected=True, where=plan.where
    )
    return live


def _as_output(batch: pa.RecordBatch, output: pa.Schema) -> pa.RecordBatch:
    """`batch` in the column order and types Spark expects (a vector's fixed-size list becomes a list)."""
    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in output], schema=output)
