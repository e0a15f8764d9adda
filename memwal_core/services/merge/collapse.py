"""Collapse a region's pending generations to one row per primary key.

Generations are read in ascending order; within each, Lance's deletion vector
already keeps only the last write of a key. Across generations the newest
wins. A winning row with `_tombstone = true` is a delete; the rest are
upserts. Every engine collapses with these functions (in the calling
process, or inside Spark tasks: `staged.py`), so they agree.

A batch of regions is collapsed region by region: regions never share keys
(the spec's rule), so concatenating their collapsed rows is exact. A key
found in two regions is corruption, and `shared_key` finds it before anything
is committed, so a batch never commits an order-dependent result.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import CorruptMetadataError, MemwalError, NotFoundError, SchemaError, first_line
from memwal_core.model.evolution import TOMBSTONE, TableFields
from memwal_core.model.rows import conform
from memwal_core.services.engine import Engine
from memwal_core.services.merge.plan import GenerationSource, RegionMergePlan
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.options import StorageOptions

# The region a collapsed key came from, in the key tables `shared_key` checks and in staged files.
REGION_COLUMN = "_memwal_region"
READ_THREADS = 8


@dataclass(frozen=True)
class RegionCollapse:
    """What one region's prefix collapsed to (figures only; the rows stay with the engine)."""

    live_rows: int
    deleted_rows: int
    rows_read: int
    bytes_read: int


class BatchCollapse(Protocol):
    """An engine's collapse of one batch: per-region figures and failures, rows on demand.

    Rows are read per call and filtered to the regions asked for, so a commit
    retried after a stale region was dropped or re-collapsed leaves that
    region's old rows out. `release()` frees what the engine staged.
    """

    @property
    def regions(self) -> Mapping[str, RegionCollapse]: ...

    @property
    def failures(self) -> Mapping[str, MemwalError]: ...

    def live(self, regions: Set[str]) -> Iterator[pa.RecordBatch]: ...

    def deleted_keys(self, regions: Set[str], *, labelled: bool = False) -> pa.Table:
        """The deleted keys of `regions`; `labelled`: with the region of each (REGION_COLUMN)."""
        ...

    def keys(self, regions: Set[str]) -> pa.Table: ...

    def release(self) -> None: ...


def read_generation(
    source: GenerationSource,
    region: str,
    storage_options: Mapping[str, str] | None,
    fields: TableFields,
    *,
    columns: Sequence[str] | None = None,
    where: str | None = None,
) -> pa.Table:
    """The rows of one flushed generation (deletion vector applied) as the table's columns (`fields`,
    matched by Lance field id: the generation may predate a column's rename, addition or drop):
    all of them and the tombstone, or `columns`, of every row, or of those matching the Lance
    filter `where` (a filter on key columns keeps or drops every version of a key alike)."""
    what = f"region {region} generation {source.generation}"
    try:
        return fields.read(open_dataset(source.uri, storage_options), columns=columns, where=where, what=what)
    except (ValueError, OSError) as exc:
        raise NotFoundError(
            f"region {region}: flushed generation {source.generation} at {source.uri} cannot be read "
            f"({first_line(exc)})"
        ) from exc


def split(
    rows: pa.Table, primary_key: Sequence[str], base_schema: pa.Schema, *, what: str
) -> tuple[pa.Table, pa.Table]:
    """Split collapsed rows into live rows (base schema) and deleted keys."""
    if TOMBSTONE not in rows.column_names:
        raise SchemaError(f"{what} has no {TOMBSTONE} column; it is not a MemWAL flushed generation")
    tomb = pc.fill_null(rows.column(TOMBSTONE), False)
    live = conform(rows.filter(pc.invert(tomb)), base_schema, drop_extra=True, what=what)
    deleted = rows.filter(tomb).select(list(primary_key))
    return live, deleted


def collapse_tables(
    tables: Sequence[pa.Table], primary_key: Sequence[str], base_schema: pa.Schema, *, what: str
) -> tuple[pa.Table, pa.Table]:
    """Newest row per key across `tables` (ascending generation order), split."""
    if len(tables) == 1:
        return split(tables[0], primary_key, base_schema, what=what)
    import pandas as pd  # imported here: a quarter second that most commands never need

    combined = pa.concat_tables(tables, promote_options="permissive")
    for key in primary_key:
        if combined.column(key).null_count:
            raise SchemaError(f"{what} has null values in primary key column {key!r}")
    # Rows are in (generation, row) order, so the newest write of a key is its last
    # occurrence. pandas' hash-based duplicated() is 4-6x faster than a group-by here.
    keys = pd.DataFrame({k: combined.column(k).to_pandas() for k in primary_key})
    newest = ~keys.duplicated(keep="last").to_numpy()
    return split(combined.filter(pa.array(newest)), primary_key, base_schema, what=what)


def key_partition(rows: pa.Table, primary_key: Sequence[str], partitions: int) -> pa.Array:
    """Each row's key partition in [0, partitions): a hash every process computes alike."""
    import pandas as pd  # imported here: a quarter second that most commands never need

    keys = pd.DataFrame({k: rows.column(k).to_pandas() for k in primary_key})
    hashes = pd.util.hash_pandas_object(keys, index=False).to_numpy()
    return pa.array(hashes % partitions)


# A unit's live rows, deleted keys and figures.
Collapsed = tuple[pa.Table, pa.Table, RegionCollapse]


@dataclass(frozen=True)
class CollapseUnit:
    """One region's prefix, or one key partition of it (a remote engine's tasks split large regions)."""

    plan: RegionMergePlan
    part: int = 0
    partitions: int = 1

    @property
    def what(self) -> str:
        return f"region {self.plan.region} generations {self.plan.generations[0].generation}..{self.plan.target_generation}"


def collapse_unit(
    unit: CollapseUnit,
    primary_key: Sequence[str],
    fields: TableFields,
    storage_options: Mapping[str, str] | None,
) -> Collapsed:
    """Read a unit's generations (in parallel threads), keep its key partition, and collapse them."""

    def read(source: GenerationSource) -> pa.Table:
        rows = read_generation(source, unit.plan.region, storage_options, fields)
        if unit.partitions > 1:
            rows = rows.filter(pc.equal(key_partition(rows, primary_key, unit.partitions), unit.part))
        return rows

    generations = unit.plan.generations
    if len(generations) == 1:
        tables = [read(generations[0])]
    else:
        with ThreadPoolExecutor(min(READ_THREADS, len(generations))) as pool:
            tables = list(pool.map(read, generations))
    live, deleted = collapse_tables(tables, primary_key, fields.schema, what=unit.what)
    deleted = plain_keys(deleted, primary_key)
    figures = RegionCollapse(
        live_rows=live.num_rows,
        deleted_rows=deleted.num_rows,
        rows_read=sum(t.num_rows for t in tables),
        bytes_read=sum(t.nbytes for t in tables),
    )
    return live, deleted, figures


def plain_keys(rows: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """The key columns of `rows` without field metadata, so every region's keys concatenate."""
    return pa.table({k: rows.column(k) for k in primary_key})


def with_region(rows: pa.Table, region: str) -> pa.Table:
    """`rows` with the region they came from as a last column (repeated in Arrow: a Python list of the
    name per row cost 1-2 us a row, a tenth of a second over a 1,000-region batch)."""
    return rows.append_column(REGION_COLUMN, pa.repeat(pa.scalar(region, pa.string()), rows.num_rows))


def shared_key(keys: pa.Table, primary_key: Sequence[str]) -> tuple[tuple[object, ...], list[str]] | None:
    """A key that two regions both hold in `keys` (key columns and REGION_COLUMN), or None.

    Within a region keys are unique after the collapse, so any repeated key
    comes from a second region.
    """
    import pandas as pd  # imported here: a quarter second that most commands never need

    if keys.num_rows == 0:
        return None
    # The region names are read only when a key repeats: converting them is most of the cost.
    frame = pd.DataFrame({k: keys.column(k).to_pandas() for k in primary_key})
    repeated = frame.duplicated(keep=False).to_numpy()
    if not repeated.any():
        return None
    first = int(repeated.argmax())
    same = repeated.copy()
    for k in primary_key:
        same &= (frame[k] == frame[k].iloc[first]).to_numpy()
    key = tuple(keys.column(k)[first].as_py() for k in primary_key)
    return key, sorted(set(keys.column(REGION_COLUMN).filter(pa.array(same)).to_pylist()))


def shared_key_error(key: tuple[object, ...], regions: Sequence[str]) -> CorruptMetadataError:
    """The refusal of regions that hold the same key: the merged result would depend on their order."""
    shown = key[0] if len(key) == 1 else key
    return CorruptMetadataError(
        f"regions {', '.join(regions)} all hold primary key {shown!r}; regions must never share keys, "
        "so merging them together would depend on their order (refused, nothing committed for them)"
    )


@dataclass
class InMemoryCollapse:
    """A collapse in this process: every region's rows held in memory."""

    live_tables: dict[str, pa.Table] = field(default_factory=dict)
    deleted_tables: dict[str, pa.Table] = field(default_factory=dict)
    regions: dict[str, RegionCollapse] = field(default_factory=dict)
    failures: dict[str, MemwalError] = field(default_factory=dict)

    def live(self, regions: Set[str]) -> Iterator[pa.RecordBatch]:
        for region, table in self.live_tables.items():
            if region in regions:
                yield from table.to_batches()

    def deleted_keys(self, regions: Set[str], *, labelled: bool = False) -> pa.Table:
        tables = [
            with_region(t, r) if labelled else t for r, t in self.deleted_tables.items() if r in regions
        ]
        return pa.concat_tables(tables) if tables else pa.table({})

    def keys(self, regions: Set[str]) -> pa.Table:
        parts = [
            with_region(pa.concat_tables([plain_keys(self.live_tables[r], d.column_names), d]), r)
            for r, d in self.deleted_tables.items()
            if r in regions
        ]
        return pa.concat_tables(parts) if parts else pa.table({})

    def release(self) -> None:
        self.live_tables.clear()
        self.deleted_tables.clear()


def batch_job(plans: Sequence[RegionMergePlan]) -> str:
    """How a batch's collapse is named in errors and in Spark's UI."""
    return f"merge of {len(plans)} region(s), {sum(p.rows for p in plans)} rows"


def collapse_units(
    engine: Engine,
    units: Sequence[CollapseUnit],
    primary_key: Sequence[str],
    fields: TableFields,
    storage_options: Mapping[str, str] | None,
    *,
    what: str,
) -> list[Collapsed | MemwalError]:
    """Every unit collapsed as a task of `engine`; a unit's memwal error is its outcome, so only its region fails."""

    def one(unit: CollapseUnit) -> Collapsed | MemwalError:
        try:
            return collapse_unit(unit, primary_key, fields, storage_options)
        except MemwalError as exc:
            return exc

    # On an object store a unit mostly waits: opening a generation is three requests one after
    # another, so units may run as many at once as requests may be in flight. On local disk nothing
    # waits and a unit is CPU: more units than the engine's threads (sized for CPU) only fight over
    # the cores and malloc's two arenas (a 64-region round on local disk took 1.5-2.4x one commit of
    # its rows with 64 at once).
    remote = bool(units) and "://" in units[0].plan.generations[0].uri
    waiting = StorageOptions(storage_options).max_concurrent_requests() if remote else None
    return engine.run(one, units, what=what, waiting=waiting)


def collapse_in_process(
    engine: Engine,
    plans: Sequence[RegionMergePlan],
    primary_key: Sequence[str],
    fields: TableFields,
    storage_options: Mapping[str, str] | None,
) -> InMemoryCollapse:
    """A batch collapsed by an engine that runs in this process: every region whole, its rows kept in memory."""
    result = InMemoryCollapse()
    units = [CollapseUnit(plan) for plan in plans]
    outcomes = collapse_units(engine, units, primary_key, fields, storage_options, what=batch_job(plans))
    for plan, outcome in zip(plans, outcomes, strict=True):
        if isinstance(outcome, MemwalError):
            result.failures[plan.region] = outcome
            continue
        live, deleted, figures = outcome
        result.live_tables[plan.region] = live
        result.deleted_tables[plan.region] = deleted
        result.regions[plan.region] = figures
    return result


def collapse_local(
    generations: Sequence[GenerationSource],
    region: str,
    primary_key: Sequence[str],
    fields: TableFields,
    storage_options: Mapping[str, str] | None,
) -> tuple[pa.Table, pa.Table]:
    """One region's generations collapsed in this process: (live rows, deleted keys)."""
    plan = RegionMergePlan("", region, 0, 0, tuple(generations))
    live, deleted, _figures = collapse_unit(CollapseUnit(plan), primary_key, fields, storage_options)
    return live, deleted
