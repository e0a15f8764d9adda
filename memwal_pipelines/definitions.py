"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here.

The table comes from MEMWAL_TABLE_URI (default: the README's demo table);
its storage options from the JSON in MEMWAL_STORAGE_OPTIONS.
"""

import os

from dagster import AssetExecutionContext, Definitions, MaterializeResult, MetadataValue, asset

from memwal_core.services.status import status
from memwal_pipelines.resources import MemWalTableResource

DEFAULT_TABLE_URI = "demo/table"


@asset(group_name="memwal", description="Regions, merge progress and backlog of the MemWAL table.")
def memwal_status(context: AssetExecutionContext, table: MemWalTableResource) -> MaterializeResult:  # type: ignore[type-arg]
    """Record the table's status as materialization metadata, so the UI plots the backlog."""
    with table.open() as opened:
        result = status(opened)
    context.log.info(f"{len(result.regions)} regions, {result.pending_total} pending generations")
    return MaterializeResult(
        metadata={
            "table_version": result.version,
            "regions": len(result.regions),
            "pending_generations": result.pending_total,
            "status": MetadataValue.json(result.to_json()),
        }
    )


defs = Definitions(
    assets=[memwal_status],
    resources={
        "table": MemWalTableResource(
            uri=os.environ.get("MEMWAL_TABLE_URI", DEFAULT_TABLE_URI),
            storage_options_env="MEMWAL_STORAGE_OPTIONS",
        )
    },
)
