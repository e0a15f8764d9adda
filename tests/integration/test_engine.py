"""The engine contract on Spark: the shared session injected, tasks in Python workers, not the driver."""

from __future__ import annotations

import os
from typing import Any

from memwal_core.services.engine import SparkEngine
from tests.support.engines import check_engine_contract


def test_spark_engine_keeps_the_contract_on_the_injected_session(spark: Any) -> None:
    engine = SparkEngine(spark)
    check_engine_contract(engine)
    assert engine.session is spark and engine.parallelism() == 2  # local[2,2]
    driver = os.getpid()

    def where(_item: int) -> int:
        return os.getpid()

    assert driver not in engine.run(where, list(range(4)), what="pids"), "a task ran on the driver"
