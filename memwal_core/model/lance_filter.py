"""Lance filter text (DataFusion's SQL dialect) for key values: how memwal hands Lance a set of keys.

One writer of these texts for every reader of keys: a merge's delete predicate,
the consistency check's lookups and the Spark source's key selection.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable

from memwal_core.errors import SchemaError


def quoted(column: str) -> str:
    """A column name as Lance's filter reads it, spaces, capitals and backticks included."""
    return "`" + column.replace("`", "``") + "`"


def literal(value: object, column: str) -> str:
    """A literal Lance's (DataFusion's) parser reads back as `value`, a value of `column`."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    if isinstance(value, dt.datetime | dt.date):
        return f"'{value.isoformat()}'"
    raise SchemaError(
        f"primary key column {column!r} has values of type {type(value).__name__}, not supported"
    )


def equals(column: str, value: object) -> str:
    """`column` equals `value` (IS NULL for None)."""
    return f"{quoted(column)} IS NULL" if value is None else f"{quoted(column)} = {literal(value, column)}"


def one_of(column: str, values: Iterable[object]) -> str:
    """`column` is one of `values`, each listed once in order (never true when there are none)."""
    listed = sorted(set(values))  # type: ignore[type-var]
    if not listed:
        return "FALSE"
    return f"{quoted(column)} IN ({', '.join(literal(v, column) for v in listed)})"
