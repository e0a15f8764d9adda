"""The delete predicate of a merge commit: exactly the deleted keys, for every key type and shape."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest

from memwal_core.services.merge.commit import delete_predicate


@pytest.mark.parametrize(
    ("values", "typ", "expected"),
    [
        ([3, -1, 3, 2], pa.int64(), "`id` IN (-1, 2, 3)"),
        (["o'brien", "a"], pa.string(), "`id` IN ('a', 'o''brien')"),
        ([b"\x00\xff"], pa.binary(), "`id` IN (X'00ff')"),
        ([True, False], pa.bool_(), "`id` IN (FALSE, TRUE)"),
        ([1.5], pa.float64(), "`id` IN (1.5)"),
        ([decimal.Decimal("1.25")], pa.decimal128(5, 2), "`id` IN (1.25)"),
        ([dt.date(2026, 1, 2)], pa.date32(), "`id` IN ('2026-01-02')"),
    ],
    ids=["int", "string-quote", "binary", "bool", "float", "decimal", "date"],
)
def test_one_column_keys(values: list[Any], typ: pa.DataType, expected: str) -> None:
    assert delete_predicate(pa.table({"id": pa.array(values, typ)}), ["id"]) == expected


def test_a_column_name_with_a_backtick_is_quoted() -> None:
    assert delete_predicate(pa.table({"we`ird": [1]}), ["we`ird"]) == "`we``ird` IN (1)"


def test_composite_keys_group_by_all_but_the_widest_column() -> None:
    keys = pa.table({"tenant": ["a", "a", "b"], "id": [1, 2, 3]})
    assert delete_predicate(keys, ["tenant", "id"]) == (
        "(`tenant` = 'a' AND `id` IN (1, 2)) OR (`tenant` = 'b' AND `id` IN (3))"
    )
