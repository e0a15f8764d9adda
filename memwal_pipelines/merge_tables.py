"""`memwal_merge_tables`: one merge round of each of several tables, in one run.

A run is a process that takes seconds of CPU to start (Python, Dagster, the
code location); when many tables flush at once, one run per table starved them
all (bench/many_tables.py). The location's flushed-generations sensor then
puts their rounds in shared runs of this job. Each table's round is the one
its own merge job runs, recorded the same way (a `base_table` materialization
per region merged); memwal's leases keep it off regions another merger holds,
which wait for the next round.
"""

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dagster import Config, Failure, JobDefinition, OpExecutionContext, in_process_executor, job, op
from pydantic import Field

from memwal_pipelines.assets import failed_step, merge_round
from memwal_pipelines.jobs import MAX_RUNTIME_TAG
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import MemWalResource

MERGE_TABLES_JOB = "memwal_merge_tables"
# Names the tables of a shared run, so the sensor knows their rounds are queued.
TABLES_TAG = "memwal/tables"
# Tables one run merges at once (each round is itself parallel over its regions).
TABLES_AT_ONCE = 2


class MergeTablesConfig(Config):
    """The tables a shared merge run covers, by name, and per table its `MergeRoundConfig.manifest_versions`
    and `polled_at`."""

    tables: list[str]
    manifest_versions: dict[str, dict[str, int]] = Field(default_factory=dict)
    polled_at: dict[str, float] = Field(default_factory=dict)


def merge_tables_config(
    tables: Sequence[str], manifest_versions: Mapping[str, Mapping[str, int]], polled_at: Mapping[str, float]
) -> dict[str, Any]:
    versions = {name: dict(manifest_versions[name]) for name in tables if name in manifest_versions}
    seen = {name: polled_at[name] for name in tables if name in polled_at}
    config = {"tables": list(tables), "manifest_versions": versions, "polled_at": seen}
    return {"ops": {"merge_tables": {"config": config}}}


def merge_tables_job(tables: Sequence[TableKeys]) -> JobDefinition:
    """The job over `tables`: its runs carry the shortest `dagster/max_runtime` of their tables' merge runs,
    and end their rounds within it (a table not reached waits for the next round)."""
    by_name = {k.table.name: k for k in tables}

    @op(name="merge_tables", description="One merge round of each named table.")
    def merge_tables(context: OpExecutionContext, config: MergeTablesConfig, memwal: MemWalResource) -> None:
        named = [by_name[name] for name in config.tables]
        # The run's time: as a lone round's of the shortest-bounded table, shared by its rounds in turn.
        deadline = time.monotonic() + min(k.table.merge_round_seconds() for k in named)

        def one(keys: TableKeys) -> str | None:
            left = deadline - time.monotonic()
            if left <= 0:
                context.log.info(f"{keys.table.name}: left for the next round, the run's time is spent")
                return None
            name = keys.table.name
            versions, polled_at = config.manifest_versions.get(name), config.polled_at.get(name)
            failure = failed_step(merge_round(context, memwal, keys, None, left, versions, polled_at))
            return f"{keys.table.name}: {failure.description}" if failure is not None else None

        with ThreadPoolExecutor(TABLES_AT_ONCE) as pool:
            failed = [f for f in pool.map(one, named) if f is not None]
        if failed:
            raise Failure(description=f"{len(failed)} table(s) failed: " + "; ".join(failed[:3]))

    bound = min((k.table.merge_max_runtime() for k in tables), default=0)

    @job(name=MERGE_TABLES_JOB, executor_def=in_process_executor, tags={MAX_RUNTIME_TAG: str(bound)})
    def merge_tables_run() -> None:
        merge_tables()

    return merge_tables_run
