"""The definitions factory: one set of assets, checks, jobs, sensors and schedules per table.

Both ways of naming tables end here: a `MemWalTableComponent` (one table each,
`component.py`) and the MEMWAL_TABLES list (`config.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from dagster import BetaWarning, Definitions, JobDefinition

from memwal_pipelines.assets import table_assets
from memwal_pipelines.checks import table_checks
from memwal_pipelines.config import TableConfig
from memwal_pipelines.ingest import ingest_job
from memwal_pipelines.jobs import table_jobs
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.merge_tables import merge_tables_job
from memwal_pipelines.resources import memwal_resource
from memwal_pipelines.schedules import table_schedules
from memwal_pipelines.sensors import location_sensors

# Dagster 1.13 copies every asset check it loads from a component into a new AssetsDefinition with a
# beta parameter (`execution_type`) of its own: the warning on every load names nothing memwal sets.
warnings.filterwarnings("ignore", message="Parameter `execution_type`", category=BetaWarning)
# Likewise every sensor it re-points to the jobs of merged definitions, with a beta `owners` of its own.
warnings.filterwarnings("ignore", message="Parameter `owners`", category=BetaWarning)


def table_definitions(table: TableConfig) -> Definitions:
    """One table's assets and asset checks."""
    keys = TableKeys(table)
    return Definitions(
        assets=table_assets(keys),
        asset_checks=table_checks(keys),
        # One resource for every table: its parameter name `memwal` is the key.
        resources={"memwal": memwal_resource()},
    )


def location_definitions(tables: Sequence[TableConfig], own: Sequence[Definitions]) -> Definitions:
    """Every table's jobs and schedules, the location's three sensors, and the job merging many tables at once.

    `own` are the tables' own definitions (`table_definitions`, in the order of
    `tables`), the very objects the location holds: each table's jobs are
    resolved against its own (Dagster refuses two op definitions of one name).

    In one Definitions: Dagster's component loader copies a component's jobs (adding
    metadata) and re-points only the schedules and sensors beside them to the copies.
    """
    keys = [TableKeys(t) for t in tables]
    jobs = {k.table.name: table_jobs(k, definitions) for k, definitions in zip(keys, own, strict=True)}
    merge_tables = merge_tables_job(keys)
    every_job: list[JobDefinition] = [merge_tables]
    for k in keys:
        every_job += [*jobs[k.table.name].all, ingest_job(k)]
    return Definitions(
        jobs=every_job,
        schedules=[s for k in keys for s in table_schedules(k, jobs[k.table.name])],
        sensors=location_sensors(keys, jobs, merge_tables),
        resources={"memwal": memwal_resource()},
    )


def build_definitions(tables: Sequence[TableConfig]) -> Definitions:
    """Everything Dagster shows and runs for `tables`."""
    own = [table_definitions(t) for t in tables]
    return Definitions.merge(*own, location_definitions(tables, own))
