"""The rule that lets an idle table's scheduled snapshot, checks and GC start no run."""

from __future__ import annotations

import pytest

from memwal_pipelines.schedules import REFRESH_SECONDS, LastRun, run_reason

NOW = 1_000_000.0
CLEAN = LastRun(started=NOW - 900, clean=True)


def reason(**given: object) -> str | None:
    args: dict[str, object] = {
        "watched": True,
        "last": CLEAN,
        "changed_at": NOW - 3600,
        "waiting": None,
        "now": NOW,
    }
    args.update(given)
    return run_reason(**args)  # type: ignore[arg-type]


def test_an_idle_watched_table_whose_last_run_passed_starts_nothing() -> None:
    assert reason() is None
    assert reason(changed_at=None) is None


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"watched": False}, "the sensors do not watch"),
        ({"last": None}, "no run yet"),
        ({"last": LastRun(NOW - 900, clean=False)}, "failed or found a failing check"),
        ({"changed_at": NOW - 900}, "changed since the last run"),
        ({"changed_at": NOW - 60}, "changed since the last run"),
        ({"waiting": "generations are pending"}, "generations are pending"),
        ({"last": LastRun(NOW - REFRESH_SECONDS, clean=True), "changed_at": None}, "6 hours old"),
    ],
)
def test_each_reason_to_run(given: dict[str, object], why: str) -> None:
    found = reason(**given)
    assert found is not None and why in found
