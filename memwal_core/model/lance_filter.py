"""Lance filter text (its SQL dialect) for primary-key values: what a read hands Lance to select keys.

Keys are of the types Lance hashes (integers, booleans, strings, binary), so
these are the only literals written here; anything else is refused rather than
guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memwal_core.errors import SchemaError


def column(name: str) -> str:
    """A column name as Lance's SQL filter reads it, spaces and capitals included."""
    return "`" + name.replace("`", "``") + "`"


def literal(value: Any) -> str:
    """A key value as a literal of Lance's filter dialect."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    raise SchemaError(
        f"a primary key value of type {type(value).__name__} cannot be written as a Lance filter"
    )


def equals(name: str, value: Any) -> str:
    """`name` equals `value` (IS NULL for None)."""
    return f"{column(name)} IS NULL" if value is None else f"{column(name)} = {literal(value)}"


def one_of(name: str, values: Iterable[Any]) -> str:
    """`name` is one of `values` (never matches when there are none)."""
    listed = [literal(v) for v in values]
    return f"{column(name)} IN ({', '.join(listed)})" if listed else "false"
