"""Turning caller data into rows that fit a table, or refusing it with the column named.

Lance's writer rejects a batch that does not match the table schema exactly,
but only when it reaches the WAL and with a message about "batch 0"; we check
everything first so nothing of a bad call is written and the error names the
column at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from memwal_core.errors import SchemaError, first_line


def iter_tables(data: Any) -> Iterator[pa.Table]:
    """Arrow-like input as tables: Table, RecordBatch, RecordBatchReader, pandas, dict or list of dicts."""
    if isinstance(data, pa.Table):
        yield data
    elif isinstance(data, pa.RecordBatch):
        yield pa.Table.from_batches([data])
    elif isinstance(data, pa.RecordBatchReader):
        for batch in data:
            yield pa.Table.from_batches([batch])
    elif isinstance(data, Mapping):
        yield _converted(data, lambda: pa.table(dict(data)))
    elif isinstance(data, list) and all(isinstance(row, Mapping) for row in data):
        yield _converted(data, lambda: pa.Table.from_pylist(data))
    else:  # pandas and polars DataFrames, anything exporting the Arrow C stream
        yield _converted(data, lambda: pa.table(data))


def _converted(data: Any, convert: Callable[[], pa.Table]) -> pa.Table:
    """Arrow's conversion of caller data; what it refuses (columns of unequal length, mixed types) is theirs."""
    try:
        return convert()
    except (TypeError, ValueError, KeyError, pa.ArrowException) as exc:
        raise SchemaError(
            f"cannot write {type(data).__name__} as rows ({first_line(exc)}): pass an Arrow table, batch, "
            "reader, DataFrame, a dict of equally long columns or a list of dicts"
        ) from None


def _cast(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    if column.type == field.type:
        return column
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(
            f"column {field.name}: cannot cast {column.type} to {field.type} ({first_line(exc)})"
        ) from None


def conform(
    rows: pa.Table,
    schema: pa.Schema,
    *,
    required: Sequence[str] | None = None,
    drop_extra: bool = False,
    what: str = "rows",
) -> pa.Table:
    """`rows` cast to `schema` (column order and types), or SchemaError naming the first bad column.

    The one rule for rows entering a table, whether a caller's puts or a
    merge's collapsed generations: only safe casts (no overflow, no lost
    precision), and no nulls in a non-nullable column, the primary key among
    them. With `required`, only those columns must be present and only they
    are kept (deletes need just the key); otherwise every schema column must
    be. Columns the schema lacks are refused, or dropped with `drop_extra`
    (a generation's tombstone, a staged part's region).
    """
    names = list(required) if required is not None else schema.names
    extra = [n for n in rows.column_names if n not in schema.names]
    if extra and required is None and not drop_extra:
        raise SchemaError(f"{what}: column {extra[0]} is not in the table schema")
    for name in names:
        if name not in rows.column_names:
            raise SchemaError(f"{what}: column {name} is missing")
    fields = [schema.field(n) for n in names]
    columns = []
    for field in fields:
        column = _cast(rows.column(field.name), field)
        if not field.nullable and column.null_count:
            raise SchemaError(
                f"{what}: column {field.name} has {column.null_count} null value(s) and may hold none"
            )
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=schema.metadata))


def key_rows(keys: Any, key_columns: Sequence[str]) -> Iterable[pa.Table]:
    """Delete keys as tables: Arrow-like input, or a plain list of values for a one-column key."""
    if isinstance(keys, (list, tuple)) and keys and not isinstance(keys[0], Mapping):
        if len(key_columns) != 1:
            raise SchemaError(f"keys for a composite primary key {list(key_columns)} need one column each")
        return [pa.table({key_columns[0]: pa.array(list(keys))})]
    return iter_tables(keys)
