"""The merge queue a flushed-generations tick reads: which tables have a round queued, and when a merge
run waiting for a run slot holds the tick's new rounds back (sensors.merge_queue)."""

from __future__ import annotations

import time

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.test_utils import create_run_for_test

from memwal_pipelines.merge_tables import MERGE_TABLES_JOB, TABLES_TAG
from memwal_pipelines.sensors import HOLD_SECONDS, UNFINISHED, MergeQueue, merge_queue


def queue(runs: list[tuple[str, DagsterRunStatus, dict[str, str]]], at: float = 0.0) -> MergeQueue:
    """The queue of an instance holding `runs` (job, status, tags), read `at` seconds after they were made
    (NOT_STARTED stands for QUEUED, which Dagster makes only for a run from a code location)."""
    instance = DagsterInstance.ephemeral()
    for job, status, tags in runs:
        create_run_for_test(instance, job_name=job, status=status, tags=tags)
    return merge_queue(instance.get_run_records(RunsFilter(statuses=UNFINISHED)), time.time() + at)


def test_a_merge_run_waiting_for_a_slot_holds_new_rounds_back() -> None:
    waiting = queue(
        [("t1_merge", DagsterRunStatus.NOT_STARTED, {}), ("t2_merge", DagsterRunStatus.STARTED, {})]
    )
    assert waiting == MergeQueue({"t1"}, held=True)
    shared = queue([(MERGE_TABLES_JOB, DagsterRunStatus.NOT_STARTED, {TABLES_TAG: "t1,t2"})])
    assert shared == MergeQueue({"t1", "t2"}, held=True)


def test_nothing_is_held_back_by_a_round_behind_its_own_table_a_stuck_queue_or_other_jobs() -> None:
    # t1's next round waits for t1's round in flight (its pool's one slot), not for a run slot.
    behind_own = queue(
        [("t1_merge", DagsterRunStatus.NOT_STARTED, {}), ("t1_merge", DagsterRunStatus.STARTED, {})]
    )
    assert behind_own == MergeQueue({"t1"}, held=False)
    # A queue that has not moved for HOLD_SECONDS (the daemon down, a slot held by a dead run).
    stuck = queue([("t1_merge", DagsterRunStatus.NOT_STARTED, {})], at=HOLD_SECONDS + 1)
    assert stuck == MergeQueue({"t1"}, held=False)
    upkeep = queue([("t1_gc", DagsterRunStatus.NOT_STARTED, {}), ("t2_merge", DagsterRunStatus.STARTING, {})])
    assert upkeep == MergeQueue(set(), held=False)
