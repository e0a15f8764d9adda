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


def test_tasks_start_in_workers_with_memwal_already_imported(spark: Any) -> None:
    """Workers fork from memwal's daemon: a task finds lance and memwal's collapse loaded before it imports anything."""

    def loaded(_item: int) -> list[str]:
        import sys

        wanted = ("pyarrow", "lance", "memwal_core.services.merge.collapse")
        return [name for name in wanted if name in sys.modules]

    every = ["pyarrow", "lance", "memwal_core.services.merge.collapse"]
    assert SparkEngine(spark).run(loaded, [0, 1], what="imports") == [every, every]


def test_spark_jobs_carry_what_they_do_as_description_and_tag(spark: Any) -> None:
    """The Spark UI lists each job by what memwal does (the description), and a tag names it on Connect too."""

    def noop(item: int) -> int:
        return item

    SparkEngine(spark).run(noop, [0, 1], what="merge of 2 region(s), 40 rows")
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found = [jobs.apply(i) for i in range(jobs.size())]
    described = [j for j in found if j.description().isDefined()]
    ours = [j for j in described if j.description().get() == "memwal merge of 2 region(s), 40 rows"]
    assert ours, [j.description() for j in found]
    tags = ours[-1].jobTags()
    assert any(tags.apply(i).endswith("memwal merge of 2 region(s); 40 rows") for i in range(tags.size()))
    assert spark.getTags() == set(), "the tag outlived its jobs"
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None
