"""The `spark` merge engine: executors read and collapse, the driver only commits.

A batch is cut into units, one per (region, key partition): a region whose
prefix holds more than `min_rows_per_task` rows is split P ways by a hash of
the primary key, so its partitions are disjoint in keys. Units of every region
in the batch are dealt to at most `defaultParallelism` tasks: Spark's
parallelism is spent across regions, which is where a cluster pays off. A
task collapses its units with the same code as the local engine (threads,
pylance imported on the executor) and stages its output as two Lance files in
the table's own storage, live rows and deleted keys, each row tagged with its
region. The driver streams the staged files into the one commit of the batch
and reads just the keys whole (the delete predicate and the shared-key check
need them): no row crosses the JVM, no shuffle, and the driver never holds the
batch's rows itself.

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
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from memwal_core.errors import BadInputError, MemwalError, SparkMergeError
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.rows import conform
from memwal_core.services.merge.collapse import (
    REGION_COLUMN,
    REGION_THREADS,
    CollapseUnit,
    RegionCollapse,
    collapse_unit,
    plain_keys,
    with_region,
)
from memwal_core.services.merge.plan import RegionMergePlan
from memwal_core.services.staging import unstage, unstage_batches
from memwal_core.spark_session import executor_error, spark_session
from memwal_core.storage.limits import with_lance_defaults
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Fewest generation rows worth a key partition of its own (MEMWAL_SPARK_ROWS_PER_TASK overrides it).
DEFAULT_ROWS_PER_TASK = 250_000
# What each task reports back to the driver: one small row per unit.
TASK_RESULT = pa.schema(
    [
        ("region", pa.string()),
        ("part", pa.int64()),
        ("rows_read", pa.int64()),
        ("bytes_read", pa.int64()),
        ("live_rows", pa.int64()),
        ("deleted_rows", pa.int64()),
        ("live_path", pa.string()),
        ("deleted_path", pa.string()),
        ("error", pa.string()),
        ("exit_code", pa.int32()),
    ]
)
TASK_RESULT_SCHEMA = "region string, part long, rows_read long, bytes_read long, live_rows long, deleted_rows long, live_path string, deleted_path string, error string, exit_code int"


def batch_units(
    plans: Sequence[RegionMergePlan], min_rows_per_task: int, parallelism: int
) -> list[CollapseUnit]:
    """Every (region, key partition) unit of a batch: large prefixes split, at most `parallelism` ways."""
    units: list[CollapseUnit] = []
    for plan in plans:
        partitions = min(max(1, math.ceil(plan.rows / min_rows_per_task)), max(1, parallelism))
        units.extend(CollapseUnit(plan, part, partitions) for part in range(partitions))
    return units


def _schemas(primary_key: Sequence[str], base_schema: pa.Schema) -> tuple[pa.Schema, pa.Schema]:
    """The staged files' schemas: live rows and deleted keys, each with its region."""
    region = pa.field(REGION_COLUMN, pa.string())
    keys = pa.schema([pa.field(k, base_schema.field(k).type) for k in primary_key])
    return base_schema.append(region), keys.append(region)


def _collapse_task(
    units: Sequence[CollapseUnit],
    tasks: int,
    primary_key: tuple[str, ...],
    base_schema: pa.Schema,
    storage_options: Mapping[str, str],
    staging: str,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor-side function: collapse task t's units (every `tasks`-th) and stage the result."""

    def one(unit: CollapseUnit) -> tuple[pa.Table, pa.Table, RegionCollapse] | MemwalError:
        try:
            return collapse_unit(unit, primary_key, base_schema, storage_options)
        except MemwalError as exc:
            return exc

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance.file import LanceFileWriter

        live_schema, deleted_schema = _schemas(primary_key, base_schema)
        options = with_lance_defaults(storage_options)
        for batch in batches:
            for task in batch.column(0).to_pylist():
                mine = units[task::tasks]
                attempt = f"{staging}/merge-{uuid.uuid4().hex}-t{task}"
                live_path, deleted_path = f"{attempt}-live.lance", f"{attempt}-deleted.lance"
                live_file = LanceFileWriter(live_path, live_schema, storage_options=options)
                deleted_file = LanceFileWriter(deleted_path, deleted_schema, storage_options=options)
                rows: list[dict[str, Any]] = []
                with ThreadPoolExecutor(max(1, min(REGION_THREADS, len(mine)))) as pool:
                    for unit, outcome in zip(mine, pool.map(one, mine), strict=True):
                        row: dict[str, Any] = {
                            **dict.fromkeys(TASK_RESULT.names),
                            "region": unit.plan.region,
                            "part": unit.part,
                            "live_path": live_path,
                            "deleted_path": deleted_path,
                        }
                        if isinstance(outcome, MemwalError):
                            rows.append({**row, "error": str(outcome), "exit_code": outcome.exit_code})
                            continue
                        live, deleted, figures = outcome
                        live_file.write_batch(with_region(live, unit.plan.region).cast(live_schema))
                        deleted_file.write_batch(with_region(deleted, unit.plan.region).cast(deleted_schema))
                        rows.append(
                            {
                                **row,
                                "rows_read": figures.rows_read,
                                "bytes_read": figures.bytes_read,
                                "live_rows": figures.live_rows,
                                "deleted_rows": figures.deleted_rows,
                            }
                        )
                live_file.close()
                deleted_file.close()
                yield pa.RecordBatch.from_pylist(rows, schema=TASK_RESULT)

    return run


class SparkEngine:
    """Collapses on Spark executors: local[*] by default, or any master (standalone, cluster)."""

    name = "spark"

    def __init__(
        self,
        spark: SparkSession | None = None,
        *,
        master: str | None = None,
        min_rows_per_task: int | None = None,
    ) -> None:
        self._spark = spark
        self._master = master
        self.min_rows_per_task = min_rows_per_task or int(
            os.environ.get("MEMWAL_SPARK_ROWS_PER_TASK", DEFAULT_ROWS_PER_TASK)
        )

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = spark_session(self._master)
        return self._spark

    def collapse_batch(
        self,
        plans: Sequence[RegionMergePlan],
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> StagedCollapse:
        parallelism = max(1, self.spark.sparkContext.defaultParallelism)
        units = batch_units(plans, self.min_rows_per_task, parallelism)
        tasks = min(len(units), parallelism)
        table_uri = plans[0].table_uri
        store = open_store(table_uri, StorageOptions(dict(storage_options)))
        try:
            staging = store.describe(STAGING_DIR)
        finally:
            store.close()
        what = f"{len(plans)} region(s), {sum(p.rows for p in plans)} rows"
        self.spark.sparkContext.setJobDescription(f"memwal merge: {what}")
        job = self.spark.range(0, tasks, 1, tasks).mapInArrow(
            _collapse_task(units, tasks, primary_key, base_schema, storage_options, staging),
            TASK_RESULT_SCHEMA,
        )
        try:
            results = job.toArrow().to_pylist()
        except Exception as exc:  # a Py4J/PySpark error wrapping the executor's traceback
            raise SparkMergeError(f"merge of {what}: Spark job failed: {executor_error(exc)}") from exc
        return StagedCollapse.from_results(
            table_uri, dict(storage_options), base_schema, primary_key, results
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
    def from_results(
        cls,
        table_uri: str,
        storage_options: dict[str, str],
        base_schema: pa.Schema,
        primary_key: tuple[str, ...],
        results: list[dict[str, Any]],
    ) -> StagedCollapse:
        """Sum each region's units; a region with any failed unit is a failure as a whole."""
        paths = sorted({r[k] for r in results for k in ("live_path", "deleted_path") if r[k]})
        staged = cls(table_uri, storage_options, base_schema, primary_key, paths)
        for r in results:
            region = r["region"]
            if r["error"] is not None:
                error = BadInputError if r["exit_code"] == BadInputError.exit_code else SparkMergeError
                staged.failures.setdefault(region, error(r["error"]))
                continue
            before = staged.regions.get(region, RegionCollapse(0, 0, 0, 0))
            staged.regions[region] = RegionCollapse(
                before.live_rows + r["live_rows"],
                before.deleted_rows + r["deleted_rows"],
                before.rows_read + r["rows_read"],
                before.bytes_read + r["bytes_read"],
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

    def deleted_keys(self, regions: Set[str]) -> pa.Table:
        tables = [
            self._only(unstage(p, self.storage_options), regions) for p in self._files("-deleted.lance")
        ]
        return plain_keys(pa.concat_tables(tables), self.primary_key) if tables else pa.table({})

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
        try:
            store.map(store.delete, [path[len(store.uri) + 1 :] for path in self.paths])
        finally:
            store.close()
