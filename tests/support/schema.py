"""The primary-key marking Lance reads from a schema, and the small test table the writer tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

from memwal_core import MemWalTable, lsm_scanner, plan_read
from memwal_core.format.primary_key import PK_META

PRIMARY_KEY = {PK_META.decode(): "true"}


def key_field(name: str, kind: pa.DataType) -> pa.Field:
    """A non-nullable primary-key column as Lance's MemWAL wants it."""
    return pa.field(name, kind, nullable=False, metadata=PRIMARY_KEY)


SCHEMA = pa.schema(
    [key_field("id", pa.int64()), pa.field("name", pa.string()), pa.field("score", pa.float64())]
)
BASE_ROWS = {0: ("a", 0.0), 1: ("b", 1.0), 2: ("c", 2.0)}


def make_table(path: Path | str, *, storage_options: dict[str, str] | None = None, **mode: Any) -> str:
    """A MemWAL table with three base rows, regions by `mode` (default: 4 buckets on id)."""
    uri = str(path)
    base = pa.table(
        {
            "id": list(BASE_ROWS),
            "name": [v[0] for v in BASE_ROWS.values()],
            "score": [v[1] for v in BASE_ROWS.values()],
        },
        schema=SCHEMA,
    )
    lance.write_dataset(base, uri, storage_options=storage_options).initialize_mem_wal(
        **(mode or {"bucket_column": "id", "num_buckets": 4})
    )
    return uri


def source_rows(n: int, *, offset: int = 0, tag: str = "s") -> pa.Table:
    """`n` rows of the shared schema's columns (no key metadata: a source file's rows)."""
    keys = [offset + i for i in range(n)]
    return pa.table({"id": keys, "name": [f"{tag}{k}" for k in keys], "score": [k / 2 for k in keys]})


def model_of(*tables: pa.Table) -> dict[int, tuple[str, float]]:
    """The base rows, then `tables` deduplicated by key, later rows winning."""
    model = dict(BASE_ROWS)
    for table in tables:
        for row in table.to_pylist():
            model[row["id"]] = (row["name"], row["score"])
    return model


def lsm_rows(uri: str, storage_options: dict[str, str] | None = None) -> dict[int, tuple[str, float]]:
    """The table as Lance's LSM scanner reads it: base plus flushed generations."""
    table = MemWalTable.open(uri, storage_options)
    rows = lsm_scanner(table, plan_read(table)).to_table().to_pylist()
    return {r["id"]: (r["name"], r["score"]) for r in rows}
