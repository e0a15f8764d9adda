"""The plan of one MemWAL-aware Spark read: a snapshot fixed on the driver, cut into Spark partitions.

The snapshot is the base table at one version and, per region, the pending
generations `plan_read` lists at that version (merged ones excluded by that
version's merge progress). Everything after planning reads exactly these
files, so a merge, a GC prune or a flush committed during the read changes
nothing it returns. (GC never deletes a generation that a retained table
version needs, and the read's version stays retained until `retain` removes
it; a directory deleted under a read anyway fails it, as it fails Lance's.)

Partitions ("slices") each read some base fragments and some regions. Base
rows of a key that a pending generation holds, written or deleted, must not
be returned; those keys can be anywhere in the base, so every slice that
reads base fragments removes the keys of all regions' pending generations
(`rows.py` builds that set once per executor process). Regions never share
a key, so a region's newest rows need nothing from any other slice.

The plan holds no rows and no credentials: ids, paths and row counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import BadInputError, CorruptMetadataError, NotFoundError
from memwal_core.format.naming import MEM_WAL_DIR
from memwal_core.model.evolution import TableFields
from memwal_core.model.routing import RegionSpec, region_spec_of
from memwal_core.model.table import MemWalTable, primary_key_of
from memwal_core.services.reader import RegionRead, plan_read
from memwal_core.services.spark_read.key_selection import KeySelection, key_selection
from memwal_core.services.spark_read.options import COLUMNS, VERSION, SourceOptions
from memwal_core.storage.lance_datasets import generation_key_bounds, open_dataset
from memwal_core.storage.object_store import absolute_uri
from memwal_core.storage.options import StorageOptions

if TYPE_CHECKING:
    import lance


@dataclass(frozen=True)
class FragmentRows:
    """A base fragment and the rows it gives the read: its physical rows, or those of the selected keys
    (what balancing the slices counts)."""

    fragment: int
    rows: int


@dataclass(frozen=True)
class ReadSlice:
    """One Spark partition: base fragments and regions that one task reads."""

    fragments: tuple[int, ...]
    regions: tuple[str, ...]


@dataclass(frozen=True)
class SourcePlan:
    """A read fixed at one table version: its columns, base fragments and regions' pending generations.

    `columns` are the columns returned; `fields` the columns read (the primary key, then the
    others: every column of the table until `reading` narrows them to a query's), with the field
    ids that find them in generations written before a column was renamed, added or dropped.
    """

    table_uri: str
    table_version: int
    primary_key: tuple[str, ...]
    columns: tuple[str, ...]
    fields: TableFields
    fragments: tuple[FragmentRows, ...]
    regions: tuple[RegionRead, ...]
    spec: RegionSpec | None
    rows_per_partition: int
    keys: KeySelection | None = None

    @property
    def schema(self) -> pa.Schema:
        return self.fields.schema

    def region(self, region: str) -> RegionRead:
        return next(r for r in self.regions if r.region == region)

    def generation_uri(self, region: str, path: str) -> str:
        return f"{self.table_uri}/{MEM_WAL_DIR}/{region}/{path}"

    def reading(self, columns: Sequence[str]) -> SourcePlan:
        """The plan of a query that returns `columns` (the schema Spark gives the reader): only those
        are read, besides the primary key."""
        missing = [c for c in columns if c not in self.schema.names]
        if missing:
            raise BadInputError(f"table {self.table_uri} has no column {missing[0]!r}")
        read = [*self.primary_key, *(c for c in columns if c not in self.primary_key)]
        return replace(self, columns=tuple(columns), fields=self.fields.select(read))

    @property
    def where(self) -> str | None:
        """The key selection as Lance's filter text, applied to base and generations alike."""
        return self.keys.sql() if self.keys is not None else None


def plan_source(options: SourceOptions) -> SourcePlan:
    """Fix the snapshot: the table version (latest, or the one asked for) and every region's pending
    generations; then, for a read of some keys only, leave out what cannot hold them.

    The plan holds every column of the table (`columns`: the ones the read returns unless told
    otherwise); `reading` narrows it to the columns of a query's schema.
    """
    with MemWalTable.open(options.uri, options.storage) as table:
        base = _version(table, options.version)
        primary_key = primary_key_of(base.schema)
        if not primary_key:
            raise CorruptMetadataError(f"table {table.uri} has no primary key; MemWAL-aware reads need one")
        columns = options.columns or tuple(base.schema.names)
        missing = [c for c in columns if c not in base.schema.names]
        if missing:
            raise BadInputError(
                f"memwal source option {COLUMNS}={','.join(columns)!r}: table {table.uri} has no column "
                f"{missing[0]!r}"
            )
        selection = key_selection(
            primary_key,
            base.schema.field(primary_key[0]).type,
            options.keys,
            options.min_key,
            options.max_key,
        )
        read = [*primary_key, *(c for c in base.schema.names if c not in primary_key)]
        regions: tuple[RegionRead, ...] = ()
        if options.use_lsm:
            regions = tuple(r for r in plan_read(table, version=base.version).regions if r.generations)
        plan = SourcePlan(
            table_uri=absolute_uri(table.uri),
            table_version=base.version,
            primary_key=tuple(primary_key),
            columns=columns,
            fields=TableFields.of(base).select(read),
            fragments=tuple(
                FragmentRows(f.fragment_id, f.metadata.physical_rows) for f in base.get_fragments()
            ),
            regions=regions,
            spec=region_spec_of(base) if regions else None,
            rows_per_partition=options.rows_per_partition,
        )
    return plan if selection is None else pruned(plan, selection, options.storage)


def _version(table: MemWalTable, version: int | None) -> lance.LanceDataset:
    """The base table at `version` (None: the latest); a version it does not have is named as the option."""
    try:
        return table.dataset(version)
    except NotFoundError as exc:  # the table itself was found when it was opened
        if version is None:
            raise
        raise NotFoundError(
            f"memwal source option {VERSION}='{version}': {exc} (its latest is {table.latest_version()})"
        ) from None


def pruned(plan: SourcePlan, selection: KeySelection, storage: StorageOptions) -> SourcePlan:
    """The plan narrowed to the selected keys: regions by routing, generations and fragments by their keys."""
    if selection.empty:
        return replace(plan, fragments=(), regions=(), keys=selection)
    narrowed = replace(plan, keys=selection)
    regions = _generations_meeting(narrowed, _routed(narrowed), storage)
    return replace(narrowed, regions=regions, fragments=_fragments_matching(narrowed, storage))


def _routed(plan: SourcePlan) -> tuple[RegionRead, ...]:
    """The regions the selected keys route to (and every region routing cannot rule out).

    Only a region spec on the key column routes: a key never moves between regions then.
    """
    spec, selection = plan.spec, plan.keys
    if spec is None or selection is None or selection.values is None or spec.column != selection.column:
        return plan.regions
    values = pa.table({spec.column: pa.array(selection.values, plan.schema.field(spec.column).type)})
    codes, keys = spec.route(values)
    wanted = {keys[code] for code in codes}
    return tuple(
        r for r in plan.regions if r.spec_id != spec.spec_id or not r.field_values or r.field_values in wanted
    )


def _generations_meeting(
    plan: SourcePlan, regions: tuple[RegionRead, ...], storage: StorageOptions
) -> tuple[RegionRead, ...]:
    """`regions` without the generations whose key range holds no selected key.

    A generation's smallest and largest key come from Lance's key-index sidecar; a generation
    whose sidecar cannot be read is kept.
    """
    selection = plan.keys
    assert selection is not None, "only a read of some keys skips generations"
    uris = [plan.generation_uri(r.region, path) for r in regions for _g, path in r.generations]
    lance_options = storage.as_dict()
    with ThreadPoolExecutor(max(1, min(len(uris), storage.max_concurrent_requests()))) as pool:
        bounds = dict(
            zip(uris, pool.map(lambda uri: generation_key_bounds(uri, lance_options), uris), strict=True)
        )

    def admitted(region: str, path: str) -> bool:
        found = bounds[plan.generation_uri(region, path)]
        return found is None or selection.meets(*found)

    kept = []
    for r in regions:
        generations = tuple((g, path) for g, path in r.generations if admitted(r.region, path))
        if generations:
            kept.append(replace(r, generations=generations, pending_rows=None))
    return tuple(kept)


def _fragments_matching(plan: SourcePlan, storage: StorageOptions) -> tuple[FragmentRows, ...]:
    """The base fragments holding a selected key, with how many rows they hold, as Lance's filtered
    scan finds them.

    Lance answers from a scalar index on the key when there is one (the index alone is read);
    otherwise it reads the key column of the base once, here, instead of every column in every task.
    """
    base = open_dataset(plan.table_uri, storage.as_dict(), version=plan.table_version)
    addresses = base.scanner(columns=[], with_row_address=True, filter=plan.where).to_table()
    counts = pc.value_counts(pc.shift_right(addresses.column("_rowaddr"), 32)).to_pylist()
    matched = {int(c["values"]): int(c["counts"]) for c in counts}
    return tuple(
        FragmentRows(f.fragment, matched[f.fragment]) for f in plan.fragments if f.fragment in matched
    )


def slices(plan: SourcePlan) -> list[ReadSlice]:
    """The plan cut into Spark partitions of about `rows_per_partition` rows each.

    Fragments are grouped in order; regions (each whole) then go to the lightest slice, largest
    first. Pending rows join the base slices until a slice would hold `SLACK` times the target:
    one more slice for a few pending rows would make a whole extra round of tasks on a small
    cluster (on two cores, 4 base slices and 1 of pending rows run in 3 rounds, not 2).
    """
    groups: list[list[FragmentRows]] = []
    for fragment in plan.fragments:
        if not groups or sum(f.rows for f in groups[-1]) + fragment.rows > plan.rows_per_partition:
            groups.append([])
        groups[-1].append(fragment)
    sizes = {r.region: _pending_rows(r) for r in plan.regions}
    total = sum(f.rows for f in plan.fragments) + sum(sizes.values())
    count = max(len(groups), math.ceil(total / (SLACK * plan.rows_per_partition)), 1 if plan.regions else 0)
    groups += [[] for _ in range(count - len(groups))]
    loads = [sum(f.rows for f in group) for group in groups]
    assigned: list[list[str]] = [[] for _ in groups]
    for region in sorted(plan.regions, key=lambda r: (-sizes[r.region], r.region)):
        lightest = loads.index(min(loads))
        assigned[lightest].append(region.region)
        loads[lightest] += sizes[region.region]
    return [
        ReadSlice(tuple(f.fragment for f in group), tuple(regions))
        for group, regions in zip(groups, assigned, strict=True)
        if group or regions
    ]


# How far past `rows_per_partition` pending rows may fill a slice before slices of their own are added.
SLACK = 1.5
# Rows counted for a generation whose manifest entry records none (Lance 14 records them).
UNKNOWN_GENERATION_ROWS = 10_000


def _pending_rows(region: RegionRead) -> int:
    if region.pending_rows is not None:
        return region.pending_rows
    return UNKNOWN_GENERATION_ROWS * len(region.generations)
