"""Durations for `retain --older-than` and `retain_older_than`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.retain import parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("3600s", timedelta(hours=1)),
        ("1w", timedelta(weeks=1)),
        ("1.5h", timedelta(minutes=90)),
        ("7D", timedelta(days=7)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "d", "7 days", "-1d", "nan", "infh", "1e3d", "99999999999d"])
def test_bad_durations_are_bad_input(text: str) -> None:
    with pytest.raises(BadInputError):
        parse_duration(text)
