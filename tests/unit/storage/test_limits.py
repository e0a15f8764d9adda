"""Storage time limits: durations as Lance spells them, defaults for the ones left out."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.storage.limits import LANCE_DEFAULTS, time_limits, with_lance_defaults


def test_defaults() -> None:
    limits = time_limits({})
    assert (limits.connect, limits.request, limits.total) == (5.0, 15.0, 50.0)


def test_units() -> None:
    limits = time_limits({"timeout": "1500ms", "connect_timeout": "2m", "client_retry_timeout": "9"})
    assert (limits.request, limits.connect, limits.total) == (1.5, 120.0, 9.0)


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": "soon"},
        {"timeout": "0s"},
        {"timeout": "25h"},
        {"connect_timeout": "-1s"},
        {"client_retry_timeout": "5s"},
        {"client_max_retries": "-1"},
    ],
)
def test_bad_limits_are_bad_input(options: dict[str, str]) -> None:
    with pytest.raises(BadInputError):
        time_limits(options)


def test_lance_gets_the_defaults_it_was_not_given() -> None:
    assert with_lance_defaults({}) == LANCE_DEFAULTS
    assert with_lance_defaults({"timeout": "5s"})["timeout"] == "5s"
