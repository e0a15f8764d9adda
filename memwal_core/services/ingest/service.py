"""`ingest`: load files into a MemWAL table through `MemWalWriter`, locally or on Spark.

Every source row is read and checked (types, nulls, columns) before the first
row is written, so bad input leaves the table untouched. Writes are upserts by
key: a rerun, or a retried Spark task, leaves the same final rows. A key that
occurs more than once in the sources ends with its last row (files in sorted
path order), under either engine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memwal_core.errors import BadInputError
from memwal_core.model.routing import region_spec_of
from memwal_core.services.ingest.sources import Ingested, SourceFiles, resolve_sources
from memwal_core.services.writer import MemWalWriter, WriterOptions
from memwal_core.table import MemWalTable


@dataclass
class IngestResult:
    """What an ingestion read and wrote, per region."""

    table: str
    engine: str
    files: int
    rows_read: int = 0
    rows_written: int = 0
    regions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "engine": self.engine,
            "files": self.files,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "regions": [{"region": r, "rows": n} for r, n in sorted(self.regions.items())],
            "seconds": round(self.seconds, 3),
        }

    def to_text(self) -> str:
        lines = [
            f"ingested {self.rows_written:,} row(s) from {self.files} file(s) into "
            f"{len(self.regions)} region(s) of {self.table} ({self.engine}, {self.seconds:.1f} s)"
        ]
        lines += [f"  {region}  {rows:,} row(s)" for region, rows in sorted(self.regions.items())]
        return "\n".join(lines)


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


def ingest(
    table: MemWalTable,
    paths: Sequence[str],
    *,
    fmt: str | None = None,
    engine: str = "local",
    spark_master: str | None = None,
    writer_options: WriterOptions | None = None,
    source_options: Mapping[str, str] | None = None,
) -> IngestResult:
    """Load `paths` (files, directories or globs) into `table`.

    `source_options` are storage options for S3 sources (default: the table's).
    """
    if engine not in ("local", "spark"):
        raise BadInputError(f"unknown ingest engine {engine!r} (use local or spark)")
    started = time.monotonic()
    if region_spec_of(table.latest) is None:
        raise BadInputError(f"table {table.uri} has manually managed regions: ingestion needs a region spec")
    sources = resolve_sources(paths, fmt, table.storage_options if source_options is None else source_options)
    options = writer_options or WriterOptions()
    if engine == "local":
        done = _write_local(table, sources, options)
    else:
        from memwal_core.services.ingest.spark_job import write_spark

        done = write_spark(table, sources, options, master=spark_master)
    return IngestResult(
        table=table.uri,
        engine=engine,
        files=len(sources.files),
        rows_read=done.rows_read,
        rows_written=done.rows_written,
        regions=done.regions,
        seconds=time.monotonic() - started,
    )
