"""The assets of one maintained table, made by `table_assets`.

- `{table}/flushed_generations`: per region, observed (the sensor records the
  backlog, its bytes and the age of its oldest generation; Lance's writer
  makes the data).
- `{table}/base_table`: per region, materialised by an ordered merge of that
  region's pending generations.
- `{table}/indexes`: the maintained base-table indexes, caught up.
- `{table}/region_snapshot`: the MemWAL index's region snapshot.
- `{table}/status`: regions, progress and backlog, for the UI.

Every service result becomes materialization metadata the same way
(`service_metadata`), so the UI plots rows, generations, seconds and table
versions over time.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    DynamicPartitionsDefinition,
    Failure,
    MaterializeResult,
    MetadataValue,
    OpExecutionContext,
    RetryRequested,
    asset,
)

from memwal_core.errors import MemwalError
from memwal_core.services.catchup import catchup
from memwal_core.services.merge.engine import LocalEngine, MergeEngine
from memwal_core.services.merge.service import merge
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status
from memwal_core.table import MemWalTable
from memwal_pipelines.config import TableConfig

# How long a busy region (another merger holds its lease) waits before the run retries.
BUSY_RETRY_SECONDS = 30
BUSY_RETRIES = 10


@dataclass(frozen=True)
class TableKeys:
    """Asset keys, partitions and resource keys of one table."""

    table: TableConfig

    @property
    def regions_name(self) -> str:
        return f"{self.table.name}_regions"

    @property
    def regions(self) -> DynamicPartitionsDefinition:
        return DynamicPartitionsDefinition(name=self.regions_name)

    def key(self, name: str) -> AssetKey:
        return AssetKey([self.table.name, name])

    @property
    def flushed(self) -> AssetKey:
        return self.key("flushed_generations")

    @property
    def base(self) -> AssetKey:
        return self.key("base_table")

    @property
    def indexes(self) -> AssetKey:
        return self.key("indexes")

    @property
    def snapshot(self) -> AssetKey:
        return self.key("region_snapshot")

    @property
    def status(self) -> AssetKey:
        return self.key("status")

    @property
    def table_resource(self) -> str:
        return f"{self.table.name}_table"

    @property
    def spark_resource(self) -> str:
        return f"{self.table.name}_spark"


def service_metadata(result: Any, **extra: Any) -> dict[str, Any]:
    """A service result as metadata: its top-level numbers (plotted by the UI) and its whole JSON."""
    payload: Mapping[str, Any] = result.to_json()
    numbers = {k: v for k, v in payload.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {**numbers, **extra, "result": MetadataValue.json(dict(payload))}


def on_table(
    context: AssetExecutionContext | OpExecutionContext, keys: TableKeys, run: Callable[[MemWalTable], Any]
) -> Any:
    """Open the table from its resource and run one service; memwal's errors become a one-line Failure."""
    try:
        with getattr(context.resources, keys.table_resource).open() as opened:
            return run(opened)
    except MemwalError as exc:
        raise Failure(description=str(exc), metadata={"error": type(exc).__name__}) from exc


def _service_asset(
    keys: TableKeys,
    key: AssetKey,
    description: str,
    run: Callable[[MemWalTable], Any],
    extra: Callable[[Any], dict[str, Any]],
) -> AssetsDefinition:
    """An unpartitioned asset that runs one service on the table after merges."""

    @asset(
        key=key,
        deps=[keys.base],
        group_name=keys.table.name,
        kinds={"lance"},
        required_resource_keys={keys.table_resource},
        description=description,
    )
    def service(context: AssetExecutionContext) -> MaterializeResult:  # type: ignore[type-arg]
        result = on_table(context, keys, run)
        context.log.info(result.to_text())
        return MaterializeResult(metadata=service_metadata(result, **extra(result)))

    return service


def _max_lag_after(result: Any) -> dict[str, Any]:
    return {"max_lag_after": max((max(i.lag_after.values(), default=0) for i in result.indexes), default=0)}


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
        required_resource_keys={keys.table_resource, keys.spark_resource},
        description="The base table, per region: pending generations merged in ascending order.",
    )
    def base_table(context: AssetExecutionContext) -> MaterializeResult:  # type: ignore[type-arg]
        region = context.partition_key
        engine: MergeEngine = LocalEngine()
        if table.merge_engine == "spark":
            from memwal_core.services.merge.spark_engine import SparkEngine

            engine = SparkEngine(getattr(context.resources, keys.spark_resource).spark_session)

        def run(opened: MemWalTable) -> tuple[Any, int]:
            result = merge(
                opened, regions=[region], max_generations=table.max_generations_per_merge, engine=engine
            )
            return result, opened.index_details().merged_generation(region)

        result, merged = on_table(context, keys, run)
        if result.busy:
            context.log.info(f"region {region}: another merger holds it; retrying later")
            raise RetryRequested(max_retries=BUSY_RETRIES, seconds_to_wait=BUSY_RETRY_SECONDS)
        if result.failures:
            raise Failure(description=result.failures[0].error, metadata={"region": region})
        context.log.info(result.to_text())
        return MaterializeResult(metadata=service_metadata(result, merged_generation=merged))

    return [
        flushed,
        base_table,
        _service_asset(
            keys,
            keys.indexes,
            "Base-table indexes the MemWAL maintains, caught up with merged data.",
            catchup,
            _max_lag_after,
        ),
        _service_asset(
            keys,
            keys.snapshot,
            "The MemWAL index's region snapshot (one row per region).",
            build_snapshot,
            lambda _result: {},
        ),
        _service_asset(
            keys,
            keys.status,
            "Regions, merge progress and backlog of the table.",
            status,
            lambda result: {"regions": len(result.regions), "pending_generations": result.pending_total},
        ),
    ]
