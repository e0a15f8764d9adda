"""Collapse a region's pending generations to one row per primary key.

Generations are read in ascending order; within each, Lance's deletion vector
already keeps only the last write of a key. Across generations the newest
wins. A winning row with `_tombstone = true` is a delete; the rest are
upserts. This is the `local` engine (pyarrow in-process) and the reference
the Spark engine must agree with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import NotFoundError, SchemaError
from memwal_core.services.merge.plan import GenerationSource

TOMBSTONE = "_tombstone"
READ_THREADS = 8


def _nothing_to_release() -> None:
    """Rows held in memory need no clean-up."""


@dataclass(frozen=True)
class Collapsed:
    """The merge source of one region: live rows to upsert, keys to delete.

    `open_live()` gives the live rows afresh for every commit attempt: a table
    in memory (local engine) or a stream over files the Spark engine staged, so
    the driver never holds a Spark merge's rows itself. `release()` removes
    what was staged, once the region's commit is over.
    """

    live_rows: int
    open_live: Callable[[], pa.Table | pa.RecordBatchReader]
    deleted_keys: pa.Table
    rows_read: int
    bytes_read: int
    release: Callable[[], None] = _nothing_to_release

    @classmethod
    def in_memory(
        cls, live: pa.Table, deleted_keys: pa.Table, *, rows_read: int, bytes_read: int
    ) -> Collapsed:
        return cls(live.num_rows, lambda: live, deleted_keys, rows_read, bytes_read)


def read_generation(
    source: GenerationSource, region: str, storage_options: Mapping[str, str] | None
) -> pa.Table:
    """All rows of one flushed generation (deletion vector applied)."""
    import lance

    try:
        return lance.dataset(source.uri, storage_options=dict(storage_options or {}) or None).to_table()
    except (ValueError, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise NotFoundError(
            f"region {region}: flushed generation {source.generation} at {source.uri} cannot be read ({first})"
        ) from exc


def conform(rows: pa.Table, base_schema: pa.Schema, *, what: str, cast: bool = False) -> pa.Table:
    """Rows with exactly the base table's columns, order, types and field metadata.

    With `cast`, columns whose type changed on the way through another engine
    (Spark turns fixed-size lists into lists, strings into large strings) are
    cast back; without it a type difference is schema drift.
    """
    missing = [name for name in base_schema.names if name not in rows.column_names]
    if missing:
        raise SchemaError(f"{what} lacks column {missing[0]!r} of the base table (schema drift)")
    columns = []
    for f in base_schema:
        column = rows.column(f.name)
        if column.type != f.type and cast:
            column = column.cast(f.type)
        if column.type != f.type:
            raise SchemaError(f"{what} has column {f.name!r} of type {column.type}, the base table {f.type}")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=base_schema)


def split(
    rows: pa.Table, primary_key: Sequence[str], base_schema: pa.Schema, *, what: str, cast: bool = False
) -> tuple[pa.Table, pa.Table]:
    """Split collapsed rows into live rows (base schema) and deleted keys."""
    if TOMBSTONE not in rows.column_names:
        raise SchemaError(f"{what} has no {TOMBSTONE} column; it is not a MemWAL flushed generation")
    tomb = pc.fill_null(rows.column(TOMBSTONE), False)
    live = conform(rows.filter(pc.invert(tomb)), base_schema, what=what, cast=cast)
    deleted = rows.filter(tomb).select(list(primary_key))
    return live, deleted


def collapse_tables(
    tables: Sequence[pa.Table], primary_key: Sequence[str], base_schema: pa.Schema, *, what: str
) -> tuple[pa.Table, pa.Table]:
    """Newest row per key across `tables` (ascending generation order), split."""
    if len(tables) == 1:
        return split(tables[0], primary_key, base_schema, what=what)
    combined = pa.concat_tables(tables, promote_options="permissive")
    for key in primary_key:
        if combined.column(key).null_count:
            raise SchemaError(f"{what} has null values in primary key column {key!r}")
    # Rows are in (generation, row) order, so the newest write of a key is its last
    # occurrence. pandas' hash-based duplicated() is 4-6x faster than a group-by here.
    keys = pd.DataFrame({k: combined.column(k).to_pandas() for k in primary_key})
    newest = ~keys.duplicated(keep="last").to_numpy()
    return split(combined.filter(pa.array(newest)), primary_key, base_schema, what=what)


def collapse_local(
    generations: Sequence[GenerationSource],
    region: str,
    primary_key: Sequence[str],
    base_schema: pa.Schema,
    storage_options: Mapping[str, str] | None,
) -> Collapsed:
    """The `local` engine: read each generation with pylance and collapse in pyarrow."""
    # Lance releases the GIL while reading, so generations load in parallel.
    with ThreadPoolExecutor(min(READ_THREADS, len(generations))) as pool:
        tables = list(pool.map(lambda g: read_generation(g, region, storage_options), generations))
    what = f"region {region} generations {generations[0].generation}..{generations[-1].generation}"
    live, deleted = collapse_tables(tables, primary_key, base_schema, what=what)
    return Collapsed.in_memory(
        live,
        deleted,
        rows_read=sum(t.num_rows for t in tables),
        bytes_read=sum(t.nbytes for t in tables),
    )
