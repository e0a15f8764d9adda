"""A read limited to some primary keys (the `keys`, `min_key` and `max_key` options) and what it may skip.

A condition on the primary key holds for every version of a key alike (the
base row, each generation's row, a delete), so applying it to the base and to
the generations before the newest version per key is chosen gives the same
rows as applying it after; regions, generations and base fragments that hold
none of the keys can then be skipped. (A condition on another column could
not be applied early: a base row might match while the key's newer pending
version does not, and the stale base row would come through.)

The selection comes from options, not from Spark's pushed filters: Spark 4.3
keeps a Python data source's pushdown result on the DataFrame and reuses it
for the next query that pushes no filter (docs/spark-read.md#filters).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memwal_core.errors import BadInputError
from memwal_core.model.lance_filter import literal, one_of, quoted
from memwal_core.services.spark_read.options import KEYS


@dataclass(frozen=True)
class KeySelection:
    """The keys of a one-column primary key a read returns: `values` (None: any) from `lowest` to `highest`."""

    column: str
    values: tuple[Any, ...] | None = None
    lowest: Any = None
    highest: Any = None

    @property
    def empty(self) -> bool:
        """No key can be selected."""
        if self.values is not None:
            return not self.values
        return self.lowest is not None and self.highest is not None and bool(self.lowest > self.highest)

    def admits(self, key: Any) -> bool:
        above = self.lowest is None or key >= self.lowest
        below = self.highest is None or key <= self.highest
        return above and below and (self.values is None or key in self.values)

    def meets(self, smallest: Any, largest: Any) -> bool:
        """Whether a selected key can lie in [smallest, largest] (a generation's key range)."""
        if self.values is not None:
            return any(smallest <= v <= largest for v in self.values)
        above = self.lowest is None or largest >= self.lowest
        below = self.highest is None or smallest <= self.highest
        return above and below

    def sql(self) -> str:
        """The selection as a Lance filter."""
        if self.values is not None:
            return one_of(self.column, self.values)
        bounds = []
        if self.lowest is not None:
            bounds.append(f"{quoted(self.column)} >= {literal(self.lowest, self.column)}")
        if self.highest is not None:
            bounds.append(f"{quoted(self.column)} <= {literal(self.highest, self.column)}")
        return " AND ".join(bounds)


def key_selection(
    primary_key: Sequence[str],
    key_type: pa.DataType,
    keys: str | None,
    min_key: str | None,
    max_key: str | None,
) -> KeySelection | None:
    """The selection the options ask for (None: every key), the values read as the key's type.

    `keys` is a comma-separated list, or a JSON array for text keys that hold commas or spaces.
    """
    if keys is None and min_key is None and max_key is None:
        return None
    if len(primary_key) != 1:
        raise BadInputError(
            f"the keys, min_key and max_key options need a one-column primary key, not {list(primary_key)}"
        )
    (name,) = primary_key
    lowest = _value(name, key_type, min_key, "min_key") if min_key is not None else None
    highest = _value(name, key_type, max_key, "max_key") if max_key is not None else None
    selection = KeySelection(name, None, lowest, highest)
    if keys is None:
        return selection
    values = {_value(name, key_type, v, KEYS) for v in _listed(keys, key_type)}
    return KeySelection(name, tuple(sorted(v for v in values if selection.admits(v))), lowest, highest)


def _listed(keys: str, key_type: pa.DataType) -> list[Any]:
    """The values of the `keys` option, or a one-line error naming it.

    Spaces around a listed number are dropped; around a listed text key they may be part of the
    key, so such a key (or an empty one) must come in a JSON array, where it is unambiguous.
    """
    if keys.lstrip().startswith("["):
        try:
            listed: list[Any] = json.loads(keys)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"memwal source option {KEYS}={keys!r} is not a JSON array ({exc})") from None
        return listed
    values = keys.split(",")
    if pa.types.is_string(key_type) or pa.types.is_large_string(key_type):
        padded = next((v for v in values if not v or v != v.strip()), None)
        if padded is not None:
            raise BadInputError(
                f"memwal source option {KEYS}={keys!r}: text key {padded!r} is empty or has spaces around "
                f"it, which a comma-separated list leaves unclear: drop the spaces, or give the keys as "
                f"a JSON array ({KEYS}={json.dumps(values)!r})"
            )
    return [v.strip() for v in values]


def _value(name: str, key_type: pa.DataType, given: Any, option: str) -> Any:
    """One option value as a value of the key column `name`, or a one-line error naming the option."""
    text = str(given).strip()
    try:
        if pa.types.is_integer(key_type):
            value = int(text)
            pa.scalar(value, key_type)  # refuses a value beyond the column's width
            return value
        if pa.types.is_boolean(key_type) and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if pa.types.is_string(key_type) or pa.types.is_large_string(key_type):
            return given if isinstance(given, str) else text
    except (ValueError, OverflowError, pa.ArrowInvalid):
        pass
    raise BadInputError(
        f"memwal source option {option}: {text!r} is not a value of key column {name} ({key_type})"
    )
