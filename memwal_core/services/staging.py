"""Staging: Spark tasks hand rows to the driver (or to later tasks) as Lance files in the table's storage.

Row data never crosses the JVM this way: a task writes its output under
`_memwal_staging/` and returns only the file's path. Whoever reads the files
removes them; GC removes what a crashed job left behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from memwal_core.storage.limits import with_lance_defaults

STREAM_BATCH_ROWS = 65_536


def stage(uri: str, rows: pa.Table, storage_options: Mapping[str, str]) -> str:
    """Write `rows` as one Lance file at `uri` (absolute); returns `uri`."""
    from lance.file import LanceFileWriter

    writer = LanceFileWriter(uri, rows.schema, storage_options=with_lance_defaults(storage_options))
    writer.write_batch(rows)
    writer.close()
    return uri


def unstage_batches(
    uri: str, storage_options: Mapping[str, str], *, columns: Sequence[str] | None = None
) -> pa.RecordBatchReader:
    """A staged file's rows (or only `columns` of them), streamed."""
    from lance.file import LanceFileReader

    reader = LanceFileReader(
        uri, storage_options=with_lance_defaults(storage_options), columns=list(columns) if columns else None
    )
    return reader.read_all(batch_size=STREAM_BATCH_ROWS).to_batches()


def unstage(
    uri: str, storage_options: Mapping[str, str], *, columns: Sequence[str] | None = None
) -> pa.Table:
    """A staged file's rows (or only `columns` of them), whole."""
    return unstage_batches(uri, storage_options, columns=columns).read_all()
