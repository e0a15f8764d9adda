"""The engine contract on the local engine, and how the CLI names engines (no JVM started)."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.engine import DEFAULT_THREADS, LocalEngine, SparkEngine, engine_named
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
