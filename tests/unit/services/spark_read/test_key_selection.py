"""Reads of some primary keys: the options read as the key's type, and what a selection admits and skips."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from memwal_core.errors import BadInputError, SchemaError
from memwal_core.model.lance_filter import literal
from memwal_core.services.spark_read.key_selection import KeySelection, key_selection


def test_listed_keys_are_read_as_the_key_type_deduplicated_and_kept_within_the_bounds() -> None:
    selection = key_selection(["id"], pa.int64(), " 9, 4,4,12 ", "5", None)
    assert selection == KeySelection("id", (9, 12), 5, None)
    assert selection.sql() == "`id` IN (9, 12)"


def test_bounds_alone_select_a_range_both_ends_included() -> None:
    selection = key_selection(["id"], pa.int32(), None, "-3", "10")
    assert selection == KeySelection("id", None, -3, 10)
    assert selection.sql() == "`id` >= -3 AND `id` <= 10"
    assert selection.admits(-3) and selection.admits(10) and not selection.admits(11)


def test_text_keys_with_commas_and_quotes_come_as_a_json_list() -> None:
    selection = key_selection(["name"], pa.string(), '["a,b", "o\'neil"]', None, None)
    assert selection is not None and selection.values == ("a,b", "o'neil")
    assert selection.sql() == "`name` IN ('a,b', 'o''neil')"


def test_spaces_around_listed_numbers_are_dropped_and_text_keys_with_spaces_come_as_a_json_list() -> None:
    assert key_selection(["id"], pa.int64(), " 1 , 2", None, None) == KeySelection("id", (1, 2))
    selection = key_selection(["name"], pa.string(), '[" sp", ""]', None, None)
    assert selection is not None and selection.values == ("", " sp")


def test_no_option_selects_every_key_and_contradictions_select_none() -> None:
    assert key_selection(["id"], pa.int64(), None, None, None) is None
    empty = key_selection(["id"], pa.int64(), "1,2", "5", None)
    assert empty is not None and empty.empty and empty.sql() == "FALSE"
    backwards = key_selection(["id"], pa.int64(), None, "9", "3")
    assert backwards is not None and backwards.empty


@pytest.mark.parametrize(
    ("primary_key", "key_type", "keys", "named"),
    [
        (["id"], pa.int64(), "1,x", "'x' is not a value of key column id"),
        (["id"], pa.int8(), "300", "'300' is not a value of key column id (int8)"),
        (["id"], pa.binary(), "01", "key column id (binary)"),
        (["a", "b"], pa.int64(), "1", "one-column primary key, not ['a', 'b']"),
        (["id"], pa.int64(), "[1,", "keys='[1,' is not a JSON array"),
        (["name"], pa.string(), "a, b", "text key ' b' is empty or has spaces around it"),
        (["name"], pa.string(), "a,,b", "text key '' is empty"),
    ],
)
def test_a_value_the_key_cannot_hold_is_named(
    primary_key: list[str], key_type: pa.DataType, keys: str, named: str
) -> None:
    with pytest.raises(BadInputError, match=re.escape(named)):
        key_selection(primary_key, key_type, keys, None, None)


@pytest.mark.parametrize(
    ("selection", "smallest", "largest", "meets"),
    [
        (KeySelection("id", (5, 50)), 10, 40, False),
        (KeySelection("id", (5, 50)), 10, 50, True),
        (KeySelection("id", None, 41, None), 10, 40, False),
        (KeySelection("id", None, 40, None), 10, 40, True),
        (KeySelection("id", None, None, 9), 10, 40, False),
        (KeySelection("id", None, 12, 20), 10, 40, True),
    ],
)
def test_a_generation_is_read_only_if_its_key_range_can_hold_a_selected_key(
    selection: KeySelection, smallest: int, largest: int, meets: bool
) -> None:
    assert selection.meets(smallest, largest) is meets


def test_a_value_no_lance_filter_can_hold_is_refused_naming_the_column() -> None:
    with pytest.raises(SchemaError, match="column 'k' has values of type object"):
        literal(object(), "k")
