"""The part of Spark's pushed filters a MemWAL-aware read can prune with: conditions on primary-key columns.

A condition on a primary-key column holds for every version of a key alike
(the base row, each generation's row, a delete), so applying it to the base
and to the generations before the newest version per key is chosen gives the
same rows as applying it after. A condition on any other column does not:
a base row could match while the key's newer pending version does not, and
filtering the two sides apart would let the stale base row through. Those are
left to Spark.

Per key column the conditions narrow to a list of values (`=`, `IN`) and/or
bounds (`<`, `<=`, `>`, `>=`). Values of a type the column cannot hold (an
integer beyond its width, text for a number) are not used: Spark still
applies every filter to the rows it gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from memwal_core.model.lance_filter import column, literal, one_of

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter

# (value, inclusive)
Bound = tuple[Any, bool]


@dataclass(frozen=True)
class KeyRange:
    """What the filters let one primary-key column be: `values` (None: any) within `low`..`high`."""

    column: str
    values: tuple[Any, ...] | None = None
    low: Bound | None = None
    high: Bound | None = None

    def _within(self, value: Any) -> bool:
        low, high = self.low, self.high
        above = low is None or value > low[0] or (low[1] and value == low[0])
        below = high is None or value < high[0] or (high[1] and value == high[0])
        return above and below

    @property
    def empty(self) -> bool:
        """No value can satisfy it."""
        if self.values is not None:
            return not self.values
        low, high = self.low, self.high
        if low is None or high is None:
            return False
        return bool(low[0] > high[0]) or (low[0] == high[0] and not (low[1] and high[1]))

    def meets(self, smallest: Any, largest: Any) -> bool:
        """Whether some value it admits lies in [smallest, largest] (a generation's key range)."""
        if self.values is not None:
            return any(smallest <= v <= largest for v in self.values)
        return not self.narrowed(None, (smallest, True), (largest, True)).empty

    def narrowed(self, values: Sequence[Any] | None, low: Bound | None, high: Bound | None) -> KeyRange:
        """This range AND the given values and bounds."""
        if low is None or (self.low is not None and not _tighter(low, self.low, above=True)):
            low = self.low
        if high is None or (self.high is not None and not _tighter(high, self.high, above=False)):
            high = self.high
        bounded = replace(self, low=low, high=high)
        listed = self.values
        if values is not None:
            listed = tuple(v for v in values if self.values is None or v in self.values)
        if listed is None:
            return bounded
        return replace(bounded, values=tuple(sorted({v for v in listed if bounded._within(v)})))

    def sql(self) -> str:
        """The range as a Lance filter."""
        if self.values is not None:
            return one_of(self.column, self.values)
        parts = []
        if self.low is not None:
            parts.append(f"{column(self.column)} {'>=' if self.low[1] else '>'} {literal(self.low[0])}")
        if self.high is not None:
            parts.append(f"{column(self.column)} {'<=' if self.high[1] else '<'} {literal(self.high[0])}")
        return " AND ".join(parts)


def _tighter(new: Bound, old: Bound, *, above: bool) -> bool:
    """Whether bound `new` excludes at least what `old` does (a lower bound if `above`)."""
    if new[0] == old[0]:
        return not new[1] or old[1]
    return bool(new[0] > old[0]) if above else bool(new[0] < old[0])


@dataclass(frozen=True)
class KeyFilter:
    """The AND of the pushed conditions on primary-key columns, one range per column."""

    ranges: tuple[KeyRange, ...]

    @property
    def empty(self) -> bool:
        """No row can match."""
        return any(r.empty for r in self.ranges)

    def range_of(self, name: str) -> KeyRange | None:
        return next((r for r in self.ranges if r.column == name), None)

    def sql(self) -> str:
        """The filter as Lance's filter text."""
        return " AND ".join(f"({r.sql()})" for r in self.ranges)


def _fits(value: Any, typ: pa.DataType) -> bool:
    """Whether `value` (as Spark hands it over) is a value of a key column of type `typ`."""
    if pa.types.is_boolean(typ):
        return isinstance(value, bool)
    if pa.types.is_integer(typ):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        bits: int = typ.bit_width
        if pa.types.is_signed_integer(typ):
            return -(1 << (bits - 1)) <= value < 1 << (bits - 1)
        return 0 <= value < 1 << bits
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return isinstance(value, str)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return isinstance(value, bytes)
    return False


def _plain(value: Any) -> Any:
    """A filter value as a key value: Spark may hand binary over as a bytearray."""
    return bytes(value) if isinstance(value, bytearray) else value


def _condition(spark_filter: Filter) -> tuple[str, Sequence[Any] | None, Bound | None, Bound | None] | None:
    """(column, values, low, high) of one Spark filter, or None when it is not a key condition we read."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    attribute: tuple[str, ...] = getattr(spark_filter, "attribute", ())
    if len(attribute) != 1:
        return None
    name = attribute[0]
    value = _plain(getattr(spark_filter, "value", None))
    if isinstance(spark_filter, EqualTo | EqualNullSafe) and value is not None:
        return name, [value], None, None
    if isinstance(spark_filter, In):
        return name, [_plain(v) for v in value if v is not None], None, None
    bounds: dict[type, tuple[Bound | None, Bound | None]] = {
        GreaterThan: ((value, False), None),
        GreaterThanOrEqual: ((value, True), None),
        LessThan: (None, (value, False)),
        LessThanOrEqual: (None, (value, True)),
    }
    found = bounds.get(type(spark_filter))
    if found is None or value is None:
        return None
    return name, None, found[0], found[1]


def key_filter(filters: Sequence[Filter], key_types: Mapping[str, pa.DataType]) -> KeyFilter | None:
    """The key conditions among Spark's pushed `filters` (AND), or None when there are none."""
    ranges: dict[str, KeyRange] = {}
    for spark_filter in filters:
        condition = _condition(spark_filter)
        if condition is None or condition[0] not in key_types:
            continue
        name, values, low, high = condition
        given = [*(values or ()), *(b[0] for b in (low, high) if b is not None)]
        if not all(_fits(v, key_types[name]) for v in given):
            continue
        ranges[name] = ranges.get(name, KeyRange(name)).narrowed(values, low, high)
    return KeyFilter(tuple(ranges.values())) if ranges else None
