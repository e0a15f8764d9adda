"""The definitions factory: one set of assets, checks, jobs, sensors and schedules per table.

Both ways of naming tables end here: a `MemWalTableComponent` (one table each,
`component.py`) and the MEMWAL_TABLES list (`config.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from dagster import BetaWarning, Definitions

from memwal_pipelines.assets import table_assets
from memwal_pipelines.checks import table_checks
from memwal_pipelines.config import TableConfig
from memwal_pipelines.ingest import ingest_job
from memwal_pipelines.jobs import table_jobs, table_schedules
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import memwal_resource
from memwal_pipelines.sensors import compaction_sensor, flushed_generations_sensor, index_catchup_sensor

# Dagster 1.13 copies every asset check it loads from a component into a new AssetsDefinition with a
# beta parameter (`execution_type`) of its own: the warning on every load names nothing memwal sets.
warnings.filterwarnings("ignore", message="Parameter `execution_type`", category=BetaWarning)


def build_definitions(tables: Sequence[TableConfig]) -> Definitions:
    """Everything Dagster shows and runs for `tables`."""
    assets: list[Any] = []
    checks: list[Any] = []
    jobs: list[Any] = []
    sensors: list[Any] = []
    schedules: list[Any] = []
    for table in tables:
        keys = TableKeys(table)
        table_job_set = table_jobs(keys)
        assets += table_assets(keys)
        checks += table_checks(keys)
        jobs += [*table_job_set.all, ingest_job(keys)]
        sensors += [
            flushed_generations_sensor(keys, table_job_set),
            index_catchup_sensor(keys, table_job_set),
            compaction_sensor(keys, table_job_set),
        ]
        schedules += table_schedules(keys, table_job_set)
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        sensors=sensors,
        schedules=schedules,
        # One resource for every table: its parameter name `memwal` is the key.
        resources={"memwal": memwal_resource()},
    )
