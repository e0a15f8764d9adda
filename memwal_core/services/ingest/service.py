"""`ingest`: load files into a MemWAL table through `MemWalWriter`, in this process or on a remote engine.

Every source row is read and checked (types, nulls, columns) before the first
row is written, so bad input leaves the table untouched. Writes are upserts by
key: a rerun, or a retried Spark task, leaves the same final rows. A key that
occurs more than once in the sources ends with its last row (sources in
command-line order, a directory's or glob's files in sorted path order: the
caller says which file wins), under either engine.

An engine that runs here streams every file through one writer (no task
needed: one writer per region is the rule anyway); a remote engine stages
the routed rows in the table's storage and writes each region in its own
task (`staged.py`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memwal_core.arguments import checked
from memwal_core.errors import BadInputError
from memwal_core.model.routing import region_spec_of
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.ingest.sources import Ingested, SourceFiles, resolve_sources
from memwal_core.services.ingest.staged import write_staged
from memwal_core.services.result import ServiceResult
from memwal_core.services.writer import MemWalWriter, WriterOptions


@dataclass(frozen=True)
class RegionRows:
    region: str
    rows: int


@dataclass(frozen=True)
class IngestResult(ServiceResult):
    """What an ingestion read and wrote, per region; rows go to the regions' WALs, so no table version."""

    engine: str
    files: int
    rows_read: int
    rows_written: int
    regions: list[RegionRows]


def _write_local(table: MemWalTable, sources: SourceFiles, options: WriterOptions) -> Ingested:
    """Check every file, then stream them through one writer."""
    schema = table.schema
    rows_read = sum(rows.num_rows for path in sources.files for rows in sources.read(path, schema))
    if rows_read == 0:
        raise BadInputError(f"the sources hold no rows ({len(sources.files)} file(s))")
    with MemWalWriter(table.uri, table.storage_options, options=options) as writer:
        rows_written = writer.put_all(rows for path in sources.files for rows in sources.read(path, schema))
    regions = {region: int(stats["rows_put"]) for region, stats in writer.stats().items()}
    return Ingested(rows_read, rows_written, regions)


@checked
def ingest(
    table: MemWalTable,
    paths: Sequence[str],
    *,
    fmt: str | None = None,
    engine: Engine | None = None,
    writer_options: WriterOptions | None = None,
    source_options: Mapping[str, str] | None = None,
) -> IngestResult:
    """Load `paths` (files, directories or globs) into `table`.

    `source_options` are storage options for sources in an object store (default: the table's);
    `engine` defaults to `LocalEngine()`.
    """
    engine = engine or LocalEngine()
    started = time.monotonic()
    if region_spec_of(table.latest) is None:
        raise BadInputError(f"table {table.uri} has manually managed regions: ingestion needs a region spec")
    sources = resolve_sources(paths, fmt, table.storage_options if source_options is None else source_options)
    options = writer_options or WriterOptions()
    if engine.remote:
        done = write_staged(engine, table, sources, options)
    else:
        done = _write_local(table, sources, options)
    return IngestResult(
        table=table.uri,
        read_version=table.latest.version,
        seconds=time.monotonic() - started,
        engine=engine.name,
        files=len(sources.files),
        rows_read=done.rows_read,
        rows_written=done.rows_written,
        regions=[RegionRows(region, rows) for region, rows in sorted(done.regions.items())],
    )
