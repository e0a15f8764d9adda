"""Property: a numeric option's parser gives a finite value in its range, or refuses; nothing else."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwal_core.cli.options import count, number
from memwal_core.errors import quoted

# What a user may type: numbers of every kind, their edge spellings, and anything at all.
TEXTS = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "+inf", "1e309", "-0", "0x10", "1_000", " 7 ", "", "7d"]),
    st.text(max_size=12),
)


def refused_quoting_numbers_only(text: str, message: str) -> bool:
    """A refusal quotes text that reads as a number; other text never (it may be a secret typed in the wrong
    place): it shows as ***."""
    try:
        float(text)
    except ValueError:
        return quoted(text) != "***" or (repr(text) not in message and "***" in message)
    return True


@given(text=TEXTS, low=st.integers(0, 3), span=st.integers(0, 10**6))
def test_count_is_a_whole_number_in_range_or_refused(text: str, low: int, span: int) -> None:
    parse = count(low, low + span)
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as exc:
        assert refused_quoting_numbers_only(text, str(exc))
        return
    assert isinstance(value, int) and low <= value <= low + span


@given(text=TEXTS, low=st.floats(-10, 10), span=st.floats(0, 1e9))
def test_number_is_finite_and_in_range_or_refused(text: str, low: float, span: float) -> None:
    parse = number(low, low + span)
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as exc:
        assert refused_quoting_numbers_only(text, str(exc))
        return
    assert math.isfinite(value) and low <= value <= low + span


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e309"])
def test_non_finite_numbers_never_pass(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        number(-math.inf, math.inf)(text)
