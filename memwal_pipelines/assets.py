"""The assets of one maintained table, made by `table_assets`.

- `{table}/flushed_generations`: per region, observed (the sensor records the
  backlog, its bytes and the age of its oldest generation; Lance's writer
  makes the data).
- `{table}/base_table`: per region, materialised by an ordered merge of that
  region's pending generations. One run merges every region it covers as one
  round (many regions per commit) and records a materialization for each
  region it merged, with that region's figures.
- `{table}/indexes`: the maintained base-table indexes, caught up.
- `{table}/region_snapshot`: the MemWAL index's region snapshot.
- `{table}/status`: regions, progress and backlog, for the UI: which regions
  are behind (a Markdown table) and table-level numbers to plot. Recorded by
  the flushed-generations sensor whenever a region changed (at most every
  `status_interval_seconds`), from the backlog it reads anyway, and by the
  snapshot job (see `status_materialization`).
- `{table}/compaction`: the base table's fragments, compacted.
- `{table}/retention`: the base-table versions kept (old untagged ones removed).
- `{table}/gc_report`: what a GC run deleted and what it kept, by rule. Its
  job runs only after the blocking `lsm_consistency` check on `base_table` passed.

Every service result becomes materialization metadata the same way
(`service_metadata`), so the UI plots rows, generations, seconds and table
versions over time.
"""

import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    OpExecutionContext,
    Output,
    RetryRequested,
    asset,
)
from pydantic import Field

from memwal_core.cli.render import render
from memwal_core.errors import MemwalError
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import RegionBacklog, TableBacklog, backlog_after
from memwal_core.services.catchup import CatchupResult, catchup
from memwal_core.services.compact import CompactionResult, compact
from memwal_core.services.gc import rules
from memwal_core.services.gc.service import GcResult, gc
from memwal_core.services.merge.result import MergeResult
from memwal_core.services.merge.service import merge
from memwal_core.services.result import ServiceResult, grouped
from memwal_core.services.retain import RetentionResult, parse_duration, retain
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status_and_backlog
from memwal_pipelines.freshness import freshness_policy
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import MemWalResource
from memwal_pipelines.status_view import StatusView

# A merge run is a single-run backfill over many region partitions: Dagster marks the
# parameter beta, and its warning on every load of the definitions would only mislead users.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=BetaWarning)

# How long a busy region (another merger holds its lease) waits before the run retries.
BUSY_RETRY_SECONDS = 30
BUSY_RETRIES = 10
# Items kept per list in a result's JSON metadata: GC or status over many regions list thousands.
METADATA_LIST_LIMIT = 50

R = TypeVar("R")
Outcome = TypeVar("Outcome")
# A result and the figures its asset adds to the result's own numbers.
Report = tuple[ServiceResult, dict[str, Any]]


def service_metadata(result: ServiceResult, **extra: Any) -> dict[str, Any]:
    """A service result as metadata: its top-level numbers (plotted by the UI) and its JSON.

    Lists in the JSON keep their first METADATA_LIST_LIMIT items: metadata is stored
    in the instance's event log with every run, and the counts are numbers above.
    """
    payload: Mapping[str, Any] = result.to_json()
    numbers = {k: v for k, v in payload.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    # Where the data work ran (merge, compaction, ingestion) and why there, shown beside the figures.
    engine = {k: payload[k] for k in ("engine", "engine_reason") if isinstance(payload.get(k), str)}
    shown = {k: v[:METADATA_LIST_LIMIT] if isinstance(v, list) else v for k, v in payload.items()}
    return {**numbers, **engine, **extra, "result": MetadataValue.json(shown)}


def on_table(memwal: MemWalResource, keys: TableKeys, service: str, run: Callable[[MemWalTable], R]) -> R:
    """Open the table from the resource and run one service; memwal's errors become a one-line Failure."""
    try:
        with memwal.open(keys.table, service) as opened:
            return run(opened)
    except MemwalError as exc:
        raise Failure(description=str(exc), metadata={"error": type(exc).__name__}) from exc


def failed_step(result: ServiceResult, metadata: Mapping[str, Any] | None = None) -> Failure | None:
    """The step failure a result calls for: one line per distinct error of the regions that failed, if any."""
    groups = grouped(result.failures)
    if not groups:
        return None
    shown = "; ".join(g.message for g in groups[:3])
    return Failure(description=f"{len(result.failures)} region(s) failed: {shown}", metadata=metadata)


def plain_report(result: ServiceResult) -> Report:
    """A result whose own numbers are all its asset shows."""
    return result, {}


def _service_asset(
    keys: TableKeys,
    key: AssetKey,
    service_name: str,
    description: str,
    run: Callable[[MemWalResource, MemWalTable], Outcome],
    report: Callable[[Outcome], Report],
    *,
    deps: Sequence[AssetKey] = (),
    spark: bool = False,
) -> AssetsDefinition:
    """An unpartitioned asset that runs one service on the table after merges.

    A result that reports failures (GC: a region it could not finish) fails the
    step, still carrying its metadata, so the run shows red and is retried.
    """

    @asset(
        key=key,
        deps=[keys.base, *deps],
        group_name=keys.table.name,
        kinds={"lance", "spark"} if spark and keys.table.merge_engine == "spark" else {"lance"},
        description=description,
    )
    def service(context: AssetExecutionContext, memwal: MemWalResource) -> MaterializeResult:  # type: ignore[type-arg]
        result, figures = report(on_table(memwal, keys, service_name, lambda opened: run(memwal, opened)))
        context.log.info(render(result))
        metadata = service_metadata(result, **figures)
        failure = failed_step(result, metadata)
        if failure is not None:
            raise failure
        return MaterializeResult(metadata=metadata)

    return service


def _catchup_report(result: CatchupResult) -> Report:
    lags = (max(i.lag_after.values(), default=0) for i in result.indexes)
    return result, {"max_lag_after": max(lags, default=0)}


KEPT_REASONS = (
    rules.NOT_MERGED,
    rules.INDEX_NOT_CAUGHT_UP,
    rules.RETAINED_VERSION,
    rules.GRACE_PERIOD,
    rules.FLUSH_IN_PROGRESS,
)


def gc_figures(result: GcResult) -> dict[str, Any]:
    """What a GC run (or dry run) did, as plottable numbers; every kept reason always present."""
    payload = result.to_json()
    kept = Counter(k["reason"] for k in payload["kept"])
    return {
        "generations_deleted": len(payload["deleted"]),
        "generations_pruned": len(payload["pruned"]),
        "wal_entries_deleted": payload["wal_entries"]["deleted"],
        **{f"kept_{reason}": kept[reason] for reason in KEPT_REASONS},
    }


def _gc_report(result: GcResult) -> Report:
    return result, gc_figures(result)


def region_observation(keys: TableKeys, region: RegionBacklog, read_at: float) -> AssetObservation:
    """A region's backlog as the UI shows it (recorded by the sensor, and after every merge)."""
    return AssetObservation(
        asset_key=keys.flushed,
        partition=region.region,
        metadata={
            "latest_flushed_generation": region.latest_flushed,
            "merged_generation": region.merged_generation,
            "pending_generations": len(region.pending),
            "pending_bytes": region.pending_bytes,
            "oldest_pending_age_seconds": round(region.oldest_pending_age(read_at), 1),
        },
    )


def read_status(table: MemWalTable) -> StatusView:
    """The status and every region's backlog, from one read of the region manifests."""
    return StatusView(*status_and_backlog(table))


def status_materialization(keys: TableKeys, view: StatusView) -> AssetMaterialization:
    """The status asset as the sensor records it, with the same metadata as the snapshot job's.

    The sensor reads every region's backlog on each tick anyway, so recording the
    status there costs no storage request and keeps the UI's view of which regions
    are behind as fresh as the sensor; the snapshot job's schedule alone (every
    15 min, off by default) would show a backlog long after it was merged.
    """
    return AssetMaterialization(
        asset_key=keys.status, metadata=service_metadata(view.status, **view.figures())
    )


def _status_report(view: StatusView) -> Report:
    return view.status, view.figures()


def region_figures(result: MergeResult) -> dict[str, dict[str, Any]]:
    """Each merged region's own figures over the round (a region may span several batches)."""
    batches = {b.batch: b for b in result.batches}
    figures: dict[str, dict[str, Any]] = {}
    for r in result.regions:
        batch = batches[r.batch]
        before = figures.get(r.region, {})
        figures[r.region] = {
            "engine": result.engine,
            "engine_reason": result.engine_reason,
            "first_generation": before.get("first_generation", r.merged_generations[0]),
            "merged_generation": r.merged_generations[-1],
            "generations_merged": before.get("generations_merged", 0) + len(r.merged_generations),
            "rows_upserted": before.get("rows_upserted", 0) + r.rows_upserted,
            "rows_deleted": before.get("rows_deleted", 0) + r.rows_deleted,
            "tombstones": before.get("tombstones", 0) + r.tombstones,
            "rows_read": before.get("rows_read", 0) + r.rows_read,
            "bytes_read": before.get("bytes_read", 0) + r.bytes_read,
            "commits": before.get("commits", 0) + 1,
            "regions_in_commit": len(batch.regions),
            "seconds_commit": round(before.get("seconds_commit", 0.0) + r.seconds_commit, 4),
            "table_version": r.table_version,
        }
    return figures


class MergeRoundConfig(Config):
    """What the sensor that asked for the round had just read: the manifest version of each region
    with pending generations, where the round starts reading it (under a writer the region
    snapshot's is minutes old), and when it last saw them all current (`polled_at`, seconds since
    the epoch): a round that starts moments later reads them as they are, a later one verifies each
    with one HEAD (`plan_merge`). Empty for a run asked for by hand."""

    manifest_versions: dict[str, int] = Field(default_factory=dict)
    polled_at: float = 0.0


def merge_round_config(
    keys: TableKeys, manifest_versions: Mapping[str, int], polled_at: float
) -> dict[str, Any]:
    """The run config of the table's merge job for a round asked for with `manifest_versions`, seen
    current at `polled_at`."""
    config = {"manifest_versions": dict(manifest_versions), "polled_at": polled_at}
    return {"ops": {keys.base.to_python_identifier(): {"config": config}}}


def merge_round(
    context: OpExecutionContext | AssetExecutionContext,
    memwal: MemWalResource,
    keys: TableKeys,
    regions: Sequence[str] | None,
    max_seconds: float | None = None,
    manifest_versions: Mapping[str, int] | None = None,
    polled_at: float | None = None,
) -> MergeResult:
    """One merge round of a table (every region, or `regions`), recorded as the UI shows it.

    Each region merged gets a `base_table` materialization with its figures, and
    each an observation of its backlog after the round. Used by the table's merge
    job and by the location's merge of many tables in one run (merge_tables.py),
    which gives each round what is left of its own time (`max_seconds`).
    `manifest_versions`, `polled_at`: `MergeRoundConfig`'s.
    """
    table = keys.table
    engine = memwal.engine(table, table.merge_engine)

    def one_round(opened: MemWalTable) -> tuple[MergeResult, TableBacklog]:
        result = merge(
            opened,
            regions=regions,
            max_generations=table.max_generations_per_merge,
            engine=engine,
            budget=table.merge_budget(),
            max_seconds=min(table.merge_round_seconds(), max_seconds or math.inf),
            manifest_versions=manifest_versions,
            polled_at=polled_at,
        )
        # The UI shows which regions are behind from these observations: refresh the merged ones, from
        # what the round read of them and merged (no request for each it caught up).
        readings = result.planned_readings()
        return result, backlog_after(opened, result.version_after, readings, result.merged_through())

    result, after = on_table(memwal, keys, "merge", one_round)
    context.log.info(render(result))
    for region, figures in region_figures(result).items():
        context.log_event(AssetMaterialization(asset_key=keys.base, partition=region, metadata=figures))
    for region_backlog in after.regions:
        context.log_event(region_observation(keys, region_backlog, after.read_at))
    return result


def table_assets(keys: TableKeys) -> list[AssetsDefinition | AssetSpec]:
    """Every asset of one table."""
    table = keys.table

    flushed = AssetSpec(
        keys.flushed,
        partitions_def=keys.regions,
        group_name=table.name,
        kinds={"lance"},
        description="Flushed generations of one region, written by Lance's MemWAL writer (observed).",
    )

    @asset(
        key=keys.base,
        partitions_def=keys.regions,
        deps=[keys.flushed],
        group_name=table.name,
        kinds={"lance", "spark"} if table.merge_engine == "spark" else {"lance"},
        # A run covers many regions (a round); the asset records each region it merged itself.
        backfill_policy=BackfillPolicy.single_run(),
        output_required=False,
        # One slot (dagster.yaml): one merge round of this table at a time.
        pool=f"memwal_merge_{table.name}",
        # Stale once a generation waited max_pending_age_seconds: the sensor stamps the table's
        # completion time (freshness.py), so the UI and the alerts agree on what "behind" means.
        freshness_policy=freshness_policy(table),
        # Where the table lives and which Spark merges it, shown on the asset's page (config refuses a URI
        # with credentials and a Connect URL with a token); storage options and a token's URL are named by
        # their variable, never shown.
        metadata={
            "table_uri": table.uri,
            "storage_options_env": table.storage_options_env or "",
            **{
                key: value
                for key, value in (
                    ("spark_master", table.spark_master),
                    ("spark_remote", table.spark_remote),
                    ("spark_remote_env", table.spark_remote_env),
                )
                if value
            },
        },
        description="The base table, per region: pending generations merged in ascending order, "
        "many regions per commit (one merge round per run).",
    )
    def base_table(
        context: AssetExecutionContext, config: MergeRoundConfig, memwal: MemWalResource
    ) -> Iterator[Output[None]]:
        chosen = context.partition_keys
        everything = set(chosen) >= set(context.instance.get_dynamic_partitions(keys.regions_name))
        regions = None if everything else chosen
        result = merge_round(
            context,
            memwal,
            keys,
            regions,
            manifest_versions=config.manifest_versions,
            polled_at=config.polled_at,
        )
        failure = failed_step(result)
        if failure is not None:
            raise failure
        if result.busy_regions:
            context.log.info(f"regions {result.busy_regions}: another merger holds them; retrying later")
            raise RetryRequested(max_retries=BUSY_RETRIES, seconds_to_wait=BUSY_RETRY_SECONDS)
        yield from ()

    def run_compaction(memwal: MemWalResource, opened: MemWalTable) -> CompactionResult:
        return compact(
            opened,
            engine=memwal.engine(table, table.merge_engine),
            target_rows_per_fragment=table.compaction_target_rows,
            max_tasks=table.compaction_max_tasks,
        )

    def run_retention(_memwal: MemWalResource, opened: MemWalTable) -> RetentionResult:
        older_than = parse_duration(table.retain_older_than)
        return retain(opened, older_than=older_than, keep_versions=table.retain_keep_versions)

    def run_gc(_memwal: MemWalResource, opened: MemWalTable) -> GcResult:
        return gc(opened, dry_run=False, policy=table.gc_policy())

    return [
        flushed,
        base_table,
        _service_asset(
            keys,
            keys.indexes,
            "catchup",
            "Base-table indexes the MemWAL maintains, caught up with merged data.",
            lambda _memwal, opened: catchup(opened),
            _catchup_report,
        ),
        _service_asset(
            keys,
            keys.snapshot,
            "snapshot",
            "The MemWAL index's region snapshot (one row per region).",
            lambda _memwal, opened: build_snapshot(opened),
            plain_report,
        ),
        _service_asset(
            keys,
            keys.status,
            "status",
            "Regions, merge progress and backlog of the table: which regions are behind (regions_table) "
            "and table-level numbers to plot. Also recorded by the flushed-generations sensor.",
            lambda _memwal, opened: read_status(opened),
            _status_report,
        ),
        _service_asset(
            keys,
            keys.compaction,
            "compact",
            "The base table's fragments, compacted by Lance's distributed compaction "
            f"(at most {table.compaction_max_tasks} rewrite tasks a run).",
            run_compaction,
            plain_report,
            spark=True,
        ),
        _service_asset(
            keys,
            keys.retention,
            "retain",
            f"Base-table versions kept: untagged versions older than {table.retain_older_than} removed.",
            run_retention,
            plain_report,
            deps=[keys.compaction],
        ),
        _service_asset(
            keys,
            keys.gc_report,
            "gc",
            "What GC deleted (generations, WAL entries, manifest versions, bytes) and what it kept, by rule. "
            "Runs only after the blocking lsm_consistency check passed.",
            run_gc,
            _gc_report,
            deps=[keys.indexes, keys.retention],
        ),
    ]
