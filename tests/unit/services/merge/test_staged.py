"""How a remote engine's merge cuts a batch into tasks (pure: no Lance, no Spark)."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.merge.staged import (
    DEFAULT_ROWS_PER_TASK,
    ROWS_PER_TASK_ENV,
    batch_units,
    rows_per_task,
)
from tests.unit.services.merge.plans import region


def test_rows_per_task_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROWS_PER_TASK_ENV, raising=False)
    assert rows_per_task() == DEFAULT_ROWS_PER_TASK
    monkeypatch.setenv(ROWS_PER_TASK_ENV, "40")
    assert rows_per_task() == 40
    for bad in ("0", "-5", "many", "1e3", ""):
        monkeypatch.setenv(ROWS_PER_TASK_ENV, bad)
        with pytest.raises(BadInputError, match=ROWS_PER_TASK_ENV):
            rows_per_task()


def test_large_regions_split_by_key_at_most_parallelism_ways() -> None:
    small, large, huge = region("s", [30]), region("l", [100, 150]), region("h", [10_000])
    units = batch_units([small, large, huge], min_rows_per_task=100, parallelism=4)
    ways = {(u.plan.region, u.partitions) for u in units}
    assert ways == {("s", 1), ("l", 3), ("h", 4)}
    assert [u.part for u in units if u.plan.region == "l"] == [0, 1, 2]
    assert len(units) == 1 + 3 + 4
