"""A batch collapsed by a remote engine: tasks stage their output in the table's storage, the driver commits.

A batch is cut into units, one per (region, key partition): a region whose
prefix holds more than `rows_per_task()` rows is split P ways by a hash of
the primary key, so its partitions are disjoint in keys. Units of every
region in the batch are dealt to at most `engine.parallelism()` tasks: the
engine's parallelism is spent across regions, which is where a cluster pays
off. A task collapses its units with the same code as an in-process collapse
(threads, pylance imported on the executor) and stages its output as two
Lance files in the table's own storage, live rows and deleted keys, each row
tagged with its region. The driver reads the staged files back into the one
commit of the batch: no row crosses the JVM and there is no shuffle. It holds
the batch's live rows whole while it commits them (at most the budget), since
Lance's join must know its source is the smaller side (`commit.py`).

A unit that fails (missing generation directory, schema drift) is reported
by its task, so that region alone is left out of the batch.

Why this shape: row data through Spark's JVM (mapInArrow output, a `groupBy`
shuffle and a collect) cost 4-7x the local engine; a full read of a
generation is ~5x cheaper than a `take` of half its rows, so a task re-reads
whole generations and filters to its key partition, and P stays small.
"""

from __future__ import annotations

import math
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import BadInputError, MemwalError, quoted
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.evolution import TableFields
from memwal_core.model.rows import conform
from memwal_core.process_memory import release_freed
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.merge.collapse import (
    REGION_COLUMN,
    CollapseUnit,
    RegionCollapse,
    batch_job,
    collapse_unit,
    plain_keys,
    with_region,
)
from memwal_core.services.merge.plan import RegionMergePlan
from memwal_core.services.staging import unstage, unstage_batches
from memwal_core.storage.limits import with_lance_defaults
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store

# Fewest generation rows worth a key partition of its own; ROWS_PER_TASK_ENV overrides it.
DEFAULT_ROWS_PER_TASK = 250_000
ROWS_PER_TASK_ENV = "MEMWAL_SPARK_ROWS_PER_TASK"


def rows_per_task() -> int:
    """The fewest rows a key partition gets: configuration, read when a batch is cut."""
    raw = os.environ.get(ROWS_PER_TASK_ENV)
    if raw is None:
        return DEFAULT_ROWS_PER_TASK
    if not raw.isdigit() or int(raw) < 1:
        raise BadInputError(
            f"{ROWS_PER_TASK_ENV} must be a whole number of rows of at least 1, not {quoted(raw)}"
        )
    return int(raw)


def batch_units(
    plans: Sequence[RegionMergePlan], min_rows_per_task: int, parallelism: int
) -> list[CollapseUnit]:
    """Every (region, key partition) unit of a batch: large prefixes split, at most `parallelism` ways."""
    units: list[CollapseUnit] = []
    for plan in plans:
        partitions = min(max(1, math.ceil(plan.rows / min_rows_per_task)), max(1, parallelism))
        units.extend(CollapseUnit(plan, part, partitions) for part in range(partitions))
    return units


@dataclass(frozen=True)
class StagedUnit:
    """What a task reports of one unit: its figures or its error, and the files its rows went to."""

    region: str
    outcome: RegionCollapse | MemwalError
    live_path: str
    deleted_path: str


def _schemas(primary_key: Sequence[str], base_schema: pa.Schema) -> tuple[pa.Schema, pa.Schema]:
    """The staged files' schemas: live rows and deleted keys, each with its region."""
    region = pa.field(REGION_COLUMN, pa.string())
    keys = pa.schema([pa.field(k, base_schema.field(k).type) for k in primary_key])
    return base_schema.append(region), keys.append(region)


def _collapse_task(
    primary_key: tuple[str, ...],
    fields: TableFields,
    storage_options: Mapping[str, str],
    staging: str,
) -> Callable[[Sequence[CollapseUnit]], list[StagedUnit]]:
    """What one task runs on the executor: collapse its units (threads), staging ONE live and ONE deleted file.

    Each unit's rows are written as soon as it is collapsed, so a task holds
    only the units in progress, never all of its share at once.
    """

    def run(units: Sequence[CollapseUnit]) -> list[StagedUnit]:
        from lance.file import LanceFileWriter

        live_schema, deleted_schema = _schemas(primary_key, fields.schema)
        options = with_lance_defaults(storage_options)
        attempt = f"{staging}/merge-{uuid.uuid4().hex}"
        live_path, deleted_path = f"{attempt}-live.lance", f"{attempt}-deleted.lance"
        live_file = LanceFileWriter(live_path, live_schema, storage_options=options)
        deleted_file = LanceFileWriter(deleted_path, deleted_schema, storage_options=options)
        writing = threading.Lock()

        def stage_unit(unit: CollapseUnit) -> RegionCollapse | MemwalError:
            try:
                live, deleted, figures = collapse_unit(unit, primary_key, fields, storage_options)
            except MemwalError as exc:
                return exc
            with writing:
                live_file.write_batch(with_region(live, unit.plan.region).cast(live_schema))
                deleted_file.write_batch(with_region(deleted, unit.plan.region).cast(deleted_schema))
            return figures

        outcomes = LocalEngine().run(stage_unit, units, what=f"collapse of {len(units)} unit(s) in one task")
        live_file.close()
        deleted_file.close()
        # Spark reuses this Python worker for later tasks: hand back what this one freed.
        release_freed()
        return [
            StagedUnit(unit.plan.region, outcome, live_path, deleted_path)
            for unit, outcome in zip(units, outcomes, strict=True)
        ]

    return run


def collapse_staged(
    engine: Engine,
    plans: Sequence[RegionMergePlan],
    primary_key: tuple[str, ...],
    fields: TableFields,
    storage_options: Mapping[str, str],
) -> StagedCollapse:
    """Collapse a batch on `engine`'s tasks, each dealt every `tasks`-th unit; its staged files, read back."""
    parallelism = engine.parallelism()
    units = batch_units(plans, rows_per_task(), parallelism)
    tasks = min(len(units), parallelism)
    table_uri = plans[0].table_uri
    staging = open_store(table_uri, StorageOptions(dict(storage_options))).describe(STAGING_DIR)
    reports = engine.run(
        _collapse_task(primary_key, fields, storage_options, staging),
        [units[task::tasks] for task in range(tasks)],
        what=batch_job(plans),
    )
    return StagedCollapse.from_reports(
        table_uri, dict(storage_options), fields.schema, primary_key, [r for task in reports for r in task]
    )


@dataclass
class StagedCollapse:
    """The Lance files the tasks of one batch staged, read back on the driver."""

    table_uri: str
    storage_options: dict[str, str]
    base_schema: pa.Schema
    primary_key: tuple[str, ...]
    paths: list[str]
    regions: dict[str, RegionCollapse] = field(default_factory=dict)
    failures: dict[str, MemwalError] = field(default_factory=dict)

    @classmethod
    def from_reports(
        cls,
        table_uri: str,
        storage_options: dict[str, str],
        base_schema: pa.Schema,
        primary_key: tuple[str, ...],
        reports: list[StagedUnit],
    ) -> StagedCollapse:
        """Sum each region's units; a region with any failed unit is a failure as a whole."""
        paths = sorted({p for r in reports for p in (r.live_path, r.deleted_path)})
        staged = cls(table_uri, storage_options, base_schema, primary_key, paths)
        for r in reports:
            if isinstance(r.outcome, MemwalError):
                staged.failures.setdefault(r.region, r.outcome)
                continue
            before = staged.regions.get(r.region, RegionCollapse(0, 0, 0, 0))
            staged.regions[r.region] = RegionCollapse(
                before.live_rows + r.outcome.live_rows,
                before.deleted_rows + r.outcome.deleted_rows,
                before.rows_read + r.outcome.rows_read,
                before.bytes_read + r.outcome.bytes_read,
            )
        for region in staged.failures:
            staged.regions.pop(region, None)
        return staged

    def _files(self, suffix: str) -> list[str]:
        return [p for p in self.paths if p.endswith(suffix)]

    def _only(self, rows: pa.Table, regions: Set[str]) -> pa.Table:
        mask = pc.is_in(rows.column(REGION_COLUMN), pa.array(sorted(regions), pa.string()))
        return rows.filter(mask)

    def live(self, regions: Set[str]) -> Iterator[pa.RecordBatch]:
        """Every chosen region's live rows in the base schema, one staged batch at a time."""
        for path in self._files("-live.lance"):
            for batch in unstage_batches(path, self.storage_options):
                rows = self._only(pa.Table.from_batches([batch]), regions)
                if rows.num_rows:
                    yield from conform(rows, self.base_schema, drop_extra=True, what=path).to_batches()

    def deleted_keys(self, regions: Set[str], *, labelled: bool = False) -> pa.Table:
        tables = [
            self._only(unstage(p, self.storage_options), regions) for p in self._files("-deleted.lance")
        ]
        columns = [*self.primary_key, REGION_COLUMN] if labelled else self.primary_key
        return plain_keys(pa.concat_tables(tables), columns) if tables else pa.table({})

    def keys(self, regions: Set[str]) -> pa.Table:
        columns = [*self.primary_key, REGION_COLUMN]
        live = [
            self._only(unstage(p, self.storage_options, columns=columns), regions)
            for p in self._files("-live.lance")
        ]
        deleted = [
            self._only(unstage(p, self.storage_options), regions) for p in self._files("-deleted.lance")
        ]
        tables = [pa.table({c: t.column(c) for c in columns}) for t in [*live, *deleted]]
        return pa.concat_tables(tables) if tables else pa.table({})

    def release(self) -> None:
        """Delete the staged files (a driver killed before this leaves them to the garbage collector)."""
        if not self.paths:
            return
        store = open_store(self.table_uri, StorageOptions(self.storage_options))
        store.map(store.delete, [path[len(store.uri) + 1 :] for path in self.paths])
