"""The base table's freshness: Dagster's FreshnessPolicy measuring the merge lag, as the alerts do.

Dagster 1.13 judges a `FreshnessPolicy.time_window(fail_window=X)` by the age of
the asset's latest materialization, and its freshness daemon records the state
(PASS, FAIL) every 30 s. memwal's lag is another age: that of the oldest
flushed generation not merged yet. The two agree when the base table's latest
materialization is stamped with the time before which every flushed
generation is merged ("complete as of"): the read's time less the table's
longest lag, or the read's time when nothing is pending. The flushed-
generations sensor records such a materialization (no partition) from the
backlog it reads anyway, so `X` = `max_pending_age_seconds` is behind in the
UI exactly when `MemwalTableBehind` fires in Prometheus and the
`merge_backlog` check fails on age, to within a sensor tick and the freshness
daemon's 30 s.

It records one when the table's completion time moved by a quarter of the
threshold or more (so an idle table never goes stale, and 50 idle tables
write a few events a minute, not one per table per status interval), and
after every merge (a merge run's own per-region materializations are stamped
with their real time, which would otherwise stand for the table until the
next record).

Dagster stamps the events a sensor returns with the time they are stored, so
the sensor writes this one itself, through the instance's event API with the
time it is true at: the one place memwal uses Dagster's internal event types.
"""

from __future__ import annotations

from datetime import timedelta

from dagster import AssetMaterialization, DagsterInstance, FreshnessPolicy
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

from memwal_core.services.backoff import Backoff
from memwal_pipelines.config import TableConfig
from memwal_pipelines.keys import TableKeys


def freshness_policy(table: TableConfig) -> FreshnessPolicy:
    """Fail once a generation has waited `max_pending_age_seconds` to be merged (at least Dagster's minute)."""
    return FreshnessPolicy.time_window(fail_window=timedelta(seconds=table.max_pending_age_seconds))


def record_interval(table: TableConfig) -> float:
    """How far the completion time moves before the sensor records it again."""
    return table.max_pending_age_seconds / 4


def probe_backoff(table: TableConfig) -> Backoff:
    """The sensor's backoff: every tick while a region changes, at least every quarter of the lag
    threshold once it is quiet, so a new flush on a long-idle region is seen, and merged, well within it."""
    return Backoff(tick=table.sensor_interval_seconds, bound=table.max_pending_age_seconds / 4)


def freshness_due(table: TableConfig, recorded: float, complete_as_of: float, merged_moved: bool) -> bool:
    """Whether the sensor records the table's completion time now (see the module docstring)."""
    return merged_moved or complete_as_of - recorded >= record_interval(table)


def record_complete_as_of(
    instance: DagsterInstance, keys: TableKeys, complete_as_of: float, pending: int
) -> None:
    """A base_table materialization stamped with the time before which every flushed generation is merged."""
    materialization = AssetMaterialization(
        asset_key=keys.base,
        description="Every generation flushed before this time is merged (recorded by the sensor).",
        metadata={"complete_as_of": complete_as_of, "pending_generations": pending},
    )
    instance.report_dagster_event(
        DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            event_specific_data=StepMaterializationData(materialization),
            job_name=RUNLESS_JOB_NAME,
        ),
        run_id=RUNLESS_RUN_ID,
        timestamp=complete_as_of,
    )
