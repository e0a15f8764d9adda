"""Jobs and schedules of one table.

Concurrency (dagster.yaml): one run per region partition at a time (the
`dagster/partition` tag carries the region id, unique across tables, and is
set on sensor runs and UI backfills alike), and one catch-up or snapshot run
per table at a time (`memwal/service`). Writers of the MemWAL index details
(merge commits, snapshot builds) are serialised by a lease in the table's own
storage, which also covers CLI runs outside Dagster.

Every job runs its step in the run's own process (in-process executor): the
default multiprocess executor would start a second Python process per step,
which measured as most of the flush-to-merge latency (bench/lag.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
)

from memwal_pipelines.assets import TableKeys

if TYPE_CHECKING:  # what define_asset_job returns; dagster does not export the name
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

SERVICE_TAG = "memwal/service"
CHECKS_CRON = "*/10 * * * *"


@dataclass(frozen=True)
class TableJobs:
    merge: UnresolvedAssetJobDefinition
    catchup: UnresolvedAssetJobDefinition
    snapshot: UnresolvedAssetJobDefinition
    checks: UnresolvedAssetJobDefinition

    @property
    def all(self) -> list[UnresolvedAssetJobDefinition]:
        return [self.merge, self.catchup, self.snapshot, self.checks]


def table_jobs(keys: TableKeys) -> TableJobs:
    name = keys.table.name
    return TableJobs(
        merge=define_asset_job(
            f"{name}_merge",
            executor_def=in_process_executor,
            selection=AssetSelection.assets(keys.base).without_checks(),
            description="Merge one region's pending generations into the base table.",
        ),
        catchup=define_asset_job(
            f"{name}_catchup",
            executor_def=in_process_executor,
            selection=AssetSelection.assets(keys.indexes).without_checks(),
            tags={SERVICE_TAG: f"{name}:catchup"},
            description="Bring the maintained indexes up to date with merged data.",
        ),
        snapshot=define_asset_job(
            f"{name}_snapshot",
            executor_def=in_process_executor,
            selection=AssetSelection.assets(keys.snapshot, keys.status).without_checks(),
            tags={SERVICE_TAG: f"{name}:snapshot"},
            description="Build the MemWAL index region snapshot and record the table's status.",
        ),
        checks=define_asset_job(
            f"{name}_checks",
            executor_def=in_process_executor,
            selection=AssetSelection.checks_for_assets(keys.base, keys.indexes),
            tags={SERVICE_TAG: f"{name}:checks"},
            description="Merge backlog and age, index lag, LSM consistency.",
        ),
    )


def table_schedules(keys: TableKeys, jobs: TableJobs) -> list[ScheduleDefinition]:
    name = keys.table.name
    return [
        ScheduleDefinition(
            name=f"{name}_snapshot_schedule",
            job=jobs.snapshot,
            cron_schedule=keys.table.snapshot_cron,
            default_status=DefaultScheduleStatus.STOPPED,
        ),
        ScheduleDefinition(
            name=f"{name}_checks_schedule",
            job=jobs.checks,
            cron_schedule=CHECKS_CRON,
            default_status=DefaultScheduleStatus.STOPPED,
        ),
    ]
