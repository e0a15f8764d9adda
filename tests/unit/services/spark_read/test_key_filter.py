"""Which of Spark's pushed filters prune a MemWAL-aware read, and to what: conditions on key columns only."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from memwal_core.errors import SchemaError
from memwal_core.model.lance_filter import literal
from memwal_core.services.spark_read.key_filter import KeyRange, key_filter

KEYS = {"id": pa.int64(), "tenant": pa.string()}


def test_equality_and_in_narrow_to_the_values_both_allow() -> None:
    found = key_filter([In(("id",), (1, 2, 3, None)), EqualTo(("id",), 2)], KEYS)
    assert found is not None and found.range_of("id") == KeyRange("id", (2,))
    assert found.sql() == "(`id` IN (2))"


def test_bounds_keep_the_tightest_and_drop_values_outside() -> None:
    found = key_filter(
        [
            GreaterThan(("id",), 3),
            GreaterThanOrEqual(("id",), 3),
            LessThanOrEqual(("id",), 9),
            LessThan(("id",), 20),
        ],
        KEYS,
    )
    assert found is not None
    assert found.range_of("id") == KeyRange("id", None, (3, False), (9, True))
    assert found.sql() == "(`id` > 3 AND `id` <= 9)"
    listed = key_filter(
        [In(("id",), (1, 4, 9, 10)), GreaterThan(("id",), 3), LessThanOrEqual(("id",), 9)], KEYS
    )
    assert listed is not None and listed.range_of("id") == KeyRange("id", (4, 9), (3, False), (9, True))


@pytest.mark.parametrize(
    "filters",
    [
        [EqualTo(("id",), 1), EqualTo(("id",), 2)],
        [GreaterThan(("id",), 5), LessThan(("id",), 5)],
        [GreaterThanOrEqual(("id",), 5), LessThan(("id",), 5)],
        [In(("id",), (None,))],
    ],
)
def test_contradictions_match_nothing(filters: list[object]) -> None:
    found = key_filter(filters, KEYS)  # type: ignore[arg-type]
    assert found is not None and found.empty


def test_a_single_inclusive_point_is_not_empty() -> None:
    found = key_filter([GreaterThanOrEqual(("id",), 5), LessThanOrEqual(("id",), 5)], KEYS)
    assert found is not None and not found.empty


def test_other_columns_negations_and_values_the_key_cannot_hold_are_left_to_spark() -> None:
    ignored = [
        EqualTo(("score",), 1.0),
        Not(EqualTo(("id",), 1)),
        StringStartsWith(("tenant",), "a"),
        EqualTo(("id",), 2**63),
        EqualTo(("id",), "7"),
        EqualTo(("tenant",), 7),
        EqualNullSafe(("id",), None),
        EqualTo(("a", "b"), 1),
    ]
    assert key_filter(ignored, KEYS) is None


def test_each_key_column_of_a_composite_key_gets_its_range() -> None:
    found = key_filter([EqualTo(("tenant",), "o'neil"), GreaterThan(("id",), 10)], KEYS)
    assert found is not None
    assert found.sql() == "(`tenant` IN ('o''neil')) AND (`id` > 10)"


def test_binary_values_arrive_as_bytes() -> None:
    found = key_filter([EqualTo(("k",), bytearray(b"\x01\xff"))], {"k": pa.binary()})
    assert found is not None and found.sql() == "(`k` IN (X'01ff'))"


@pytest.mark.parametrize(
    ("key_range", "smallest", "largest", "meets"),
    [
        (KeyRange("id", (5, 50)), 10, 40, False),
        (KeyRange("id", (5, 50)), 10, 50, True),
        (KeyRange("id", None, (40, False), None), 10, 40, False),
        (KeyRange("id", None, (40, True), None), 10, 40, True),
        (KeyRange("id", None, None, (10, False)), 10, 40, False),
        (KeyRange("id", None, (12, True), (20, False)), 10, 40, True),
    ],
)
def test_a_generation_meets_a_range_only_if_its_key_range_overlaps(
    key_range: KeyRange, smallest: int, largest: int, meets: bool
) -> None:
    assert key_range.meets(smallest, largest) is meets


def test_a_value_no_lance_filter_can_hold_is_refused() -> None:
    with pytest.raises(SchemaError, match="float"):
        literal(1.5)
