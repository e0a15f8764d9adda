"""The soak's quiescent reads under a storage outage (bench/soak.py `when_reachable`)."""

from __future__ import annotations

import time

import pytest

from bench.soak import when_reachable
from memwal_core.errors import NotFoundError, StorageError


def test_a_quiescent_read_waits_out_an_outage_and_gives_up_only_at_its_deadline() -> None:
    """A read that cannot reach storage (chaos's outages) is tried again, not taken for a verdict: the
    2-hour chaos run crashed when a quiescent check met a 66 s SeaweedFS outage."""
    failures = iter([StorageError("down"), StorageError("down")])

    def recovering() -> str:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "rows"

    assert when_reachable(recovering, time.monotonic() + 5, pause=0.01) == "rows"

    def down() -> str:
        raise StorageError("still down")

    began = time.monotonic()
    with pytest.raises(StorageError, match="still down"):
        when_reachable(down, began + 0.2, pause=0.05)
    assert 0.1 <= time.monotonic() - began < 1.0

    def missing() -> str:
        raise NotFoundError("a generation is gone")

    with pytest.raises(NotFoundError):  # not an outage: the check decides
        when_reachable(missing, time.monotonic() + 5, pause=0.01)
