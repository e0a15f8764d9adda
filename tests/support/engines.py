"""Engines for tests: each merge test on both engines, and the engine contract checked alike on every engine.

Tasks are nested functions, so a Spark engine ships them by value: an
executor need not import the tests.
"""

from __future__ import annotations

import time

import pytest

from memwal_core.errors import EngineJobError, SchemaError
from memwal_core.services.engine import Engine, LocalEngine, SparkEngine
from memwal_core.services.merge.staged import ROWS_PER_TASK_ENV


def merge_engine(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, rows_per_task: int
) -> Engine:
    """The engine `request.param` names (see `engine_called`)."""
    return engine_called(request.param, request, monkeypatch, rows_per_task)


def engine_called(
    name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, rows_per_task: int
) -> Engine:
    """Local, Spark on the shared session, or Spark Connect on the shared server ("connect"), cutting key
    partitions of `rows_per_task` rows (few, so that even small tables are split over several tasks)."""
    if name == "local":
        return LocalEngine()
    monkeypatch.setenv(ROWS_PER_TASK_ENV, str(rows_per_task))
    if name == "connect":
        connected = SparkEngine(remote=request.getfixturevalue("connect_server").url)
        request.addfinalizer(connected.close)  # before the shared server stops
        return connected
    return SparkEngine(request.getfixturevalue("spark"))


def check_engine_contract(engine: Engine) -> None:
    """Results in item order; a task's memwal error comes back as itself; any other as one EngineJobError."""

    def square_late_first(x: int) -> int:
        time.sleep((8 - x) * 0.02)  # the first items finish last
        return x * x

    assert engine.run(square_late_first, list(range(8)), what="squares") == [x * x for x in range(8)]
    assert engine.run(square_late_first, [], what="nothing") == []

    def bad_input_at_three(x: int) -> int:
        if x == 3:
            raise SchemaError(f"source {x}.parquet: column id has 1 null")
        return x

    with pytest.raises(SchemaError) as refused:
        engine.run(bad_input_at_three, list(range(6)), what="reading")
    assert type(refused.value) is SchemaError and refused.value.exit_code == 2
    assert str(refused.value) == "source 3.parquet: column id has 1 null"

    def broken_at_two(x: int) -> int:
        if x == 2:
            raise ValueError("boom\nsecond line of the task's error")
        return x

    with pytest.raises(EngineJobError) as failed:
        engine.run(broken_at_two, list(range(6)), what="the contract job")
    message = str(failed.value)
    assert message.startswith("the contract job: ") and "boom" in message, message
    assert "\n" not in message and "second line" not in message and failed.value.exit_code == 1
