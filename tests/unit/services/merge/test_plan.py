"""Which regions a round reads at its poller's manifest version as it is (`as_polled`)."""

from __future__ import annotations

from memwal_core.services.merge.plan import POLLED_CURRENT_SECONDS, as_polled

NOW = 1_000_000.0
POLLED = {"a": 7, "b": 3}


def test_versions_seen_current_moments_ago_are_read_as_they_are() -> None:
    assert as_polled(POLLED, NOW - 5, {}, NOW) == {"a", "b"}
    assert as_polled(POLLED, NOW - POLLED_CURRENT_SECONDS, {"a": 7}, NOW) == {"a", "b"}


def test_a_snapshot_newer_than_the_poller_is_verified_instead() -> None:
    assert as_polled(POLLED, NOW - 5, {"b": 4}, NOW) == {"a"}


def test_versions_seen_long_ago_in_the_future_or_never_are_verified() -> None:
    """A round held in the queue past the bound, a poller whose clock is ahead, a run asked for by
    hand (no time: a run config from before `polled_at` reads 0)."""
    assert as_polled(POLLED, NOW - POLLED_CURRENT_SECONDS - 1, {}, NOW) == set()
    assert as_polled(POLLED, NOW + 1, {}, NOW) == set()
    assert as_polled(POLLED, None, {}, NOW) == set()
    assert as_polled(POLLED, 0.0, {}, NOW) == set()
