"""The engine contract on the local engine, and how the CLI names engines (no JVM started)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.engine import (
    DEFAULT_THREADS,
    LocalEngine,
    SparkEngine,
    SparkThreshold,
    SparkWhereItPays,
    engine_named,
)
from tests.support.engines import check_engine_contract


@pytest.mark.parametrize("threads", [1, 3, None])
def test_local_engine_keeps_the_contract(threads: int | None) -> None:
    engine = LocalEngine(threads)
    check_engine_contract(engine)
    assert (engine.name, engine.remote, engine.parallelism()) == ("local", False, threads or DEFAULT_THREADS)


def test_a_local_engine_without_threads_is_refused() -> None:
    with pytest.raises(BadInputError, match=r"LocalEngine\(\) argument threads must be at least 1, not 0"):
        LocalEngine(0)


def test_engines_by_name() -> None:
    assert isinstance(engine_named("local"), LocalEngine)
    spark = engine_named("spark", spark_master="spark://127.0.0.1:7077")
    assert isinstance(spark, SparkEngine) and (spark.name, spark.remote) == ("spark", True)
    with pytest.raises(BadInputError, match="unknown engine 'flink' \\(use local or spark\\)"):
        engine_named("flink")


@pytest.mark.parametrize(("waiting", "at_once"), [(None, 2), (1, 2), (6, 6)])
def test_tasks_that_wait_on_storage_may_run_more_at_once_than_threads(
    waiting: int | None, at_once: int
) -> None:
    """`waiting` widens a local engine's pool (its threads are sized for CPU), never narrows it."""
    lock = threading.Lock()
    running: list[int] = [0, 0]  # now, most

    def task(item: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return item * 2

    assert LocalEngine(2).run(task, list(range(12)), what="test", waiting=waiting) == [
        i * 2 for i in range(12)
    ]
    assert running[1] == at_once


def test_a_round_below_both_figures_stays_local_and_says_why() -> None:
    threshold = SparkThreshold(min_rows=1000, min_bytes=1 << 20)
    assert threshold.reason(999, (1 << 20) - 1) == (
        False,
        "999 rows < spark_min_rows 1,000 and 1.0 MiB < spark_min_bytes 1 MiB",
    )
    assert threshold.reason(1000, 0) == (True, "1,000 rows >= spark_min_rows 1,000")
    assert threshold.reason(5, 3 << 20) == (True, "3.0 MiB >= spark_min_bytes 1 MiB")
    assert SparkThreshold(0, 0).reason(0, 0)[0], "a zero threshold sends every round to Spark"
    with pytest.raises(BadInputError, match="SparkThreshold min_rows must be at least 0"):
        SparkThreshold(-1)


def test_spark_where_it_pays_opens_no_session_for_a_small_round() -> None:
    opened: list[int] = []

    def open_session() -> Any:
        opened.append(1)
        raise AssertionError("a session was opened")

    spark = SparkEngine(open_session=open_session)
    engine = SparkWhereItPays(spark, SparkThreshold(min_rows=100, min_bytes=1000))
    small = engine.for_round(99, 999)
    assert isinstance(small.engine, LocalEngine) and small.reason.startswith("99 rows < spark_min_rows 100")
    assert small.engine.run(lambda x: x + 1, [1, 2], what="test") == [2, 3]
    large = engine.for_round(100, 0)
    assert large.engine is spark and large.reason == "100 rows >= spark_min_rows 100"
    assert (engine.name, engine.remote) == ("spark", True)
    named = LocalEngine()
    assert named.for_round(10**9, 10**12) == (named, "named"), "an engine named outright runs every round"
    assert opened == [], "choosing an engine opened a session"
