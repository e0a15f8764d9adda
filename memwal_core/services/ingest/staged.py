"""Ingestion on a remote engine: tasks read and route the sources, then each region is written by one task.

Stage 1 (each task a share of the files): read with pyarrow, conform to the
table schema, split by region value (Lance's routing, `model/routing.py`) and
stage each part as a Lance file under `_memwal_staging/` in the table's
storage; only paths and counts go back to the driver. Every file is read and
checked before anything is written. Stage 2 (one task per region): read the
region's staged parts in file order and stream them through `MemWalWriter`.
A retried task opens a new writer, whose claim fences the failed attempt, and
re-puts its rows; puts are upserts, so the final rows are the same.

Why staging rather than a Spark repartition: carrying the rows through the
JVM (persist, shuffle, Arrow both ways) cost 3-5x the writes themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from memwal_core.errors import BadInputError
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.routing import RegionKey, region_spec_of
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine
from memwal_core.services.ingest.sources import Ingested, SourceFiles
from memwal_core.services.staging import stage, unstage_batches
from memwal_core.services.writer import MemWalWriter, WriterOptions
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.object_store import absolute_uri

# Stage 1 tasks per slot: files differ in size, so a few more tasks than slots even the load out.
FILE_TASKS_PER_SLOT = 2


@dataclass(frozen=True)
class StagedPart:
    """One file's rows of one region, staged: what a stage 1 task reports per part."""

    file: int
    region: RegionKey
    path: str
    rows: int


def _stage_files(
    sources: SourceFiles, schema: pa.Schema, uri: str, options: Mapping[str, str], staging: str
) -> Callable[[Sequence[tuple[int, str]]], list[StagedPart]]:
    """Stage 1 task: (file index, path) pairs in; one staged part per file batch and region value out."""

    def run(files: Sequence[tuple[int, str]]) -> list[StagedPart]:
        from memwal_core.model.routing import partition_by_code

        spec = region_spec_of(open_dataset(uri, options))
        if spec is None:
            raise BadInputError(f"table {uri} has manually managed regions")
        staged = []
        for index, path in files:
            for rows in sources.read(path, schema):
                codes, keys = spec.route(rows)
                for key, part in zip(keys, partition_by_code(rows, codes, len(keys)), strict=True):
                    if part is not None:
                        target = stage(f"{staging}/{uuid.uuid4().hex}.lance", part, options)
                        staged.append(StagedPart(index, key, target, part.num_rows))
        return staged

    return run


def _write_region(
    uri: str, options: Mapping[str, str], writer_options: WriterOptions
) -> Callable[[Sequence[str]], dict[str, int]]:
    """Stage 2 task: one region's staged parts (in file order) in, written; rows put per region out."""

    def run(paths: Sequence[str]) -> dict[str, int]:
        with MemWalWriter(uri, dict(options), options=writer_options) as writer:
            writer.put_all(batch for path in paths for batch in unstage_batches(path, options))
        return {region: int(stats["rows_put"]) for region, stats in writer.stats().items()}

    return run


def write_staged(
    engine: Engine, table: MemWalTable, sources: SourceFiles, writer_options: WriterOptions
) -> Ingested:
    """Run both stages on `engine`; the staged parts are removed either way."""
    uri = absolute_uri(table.uri)
    options = table.storage_options.as_dict()
    run_dir = f"{STAGING_DIR}/ingest-{uuid.uuid4().hex}"
    staging = f"{uri}/{run_dir}"
    files = list(enumerate(sources.files))
    tasks = max(1, min(len(files), engine.parallelism() * FILE_TASKS_PER_SLOT))
    try:
        staged = [
            part
            for parts in engine.run(
                _stage_files(sources, table.schema, uri, options, staging),
                [files[task::tasks] for task in range(tasks)],
                what=f"ingestion (reading {len(files)} file(s))",
            )
            for part in parts
        ]
        rows_read = sum(part.rows for part in staged)
        if rows_read == 0:
            raise BadInputError(f"the sources hold no rows ({len(files)} file(s))")
        by_region: dict[RegionKey, list[str]] = {}
        for part in sorted(staged, key=lambda p: p.file):  # file order: a later file's row wins
            by_region.setdefault(part.region, []).append(part.path)
        written = engine.run(
            _write_region(uri, options, writer_options),
            list(by_region.values()),
            what=f"ingestion (writing {len(by_region)} region(s))",
        )
        regions: dict[str, int] = {}
        for counts in written:
            for region, rows in counts.items():
                regions[region] = regions.get(region, 0) + rows
        return Ingested(rows_read, sum(regions.values()), regions)
    finally:
        table.store.delete_tree(run_dir)
