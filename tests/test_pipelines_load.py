"""The Dagster code location loads and its status asset materializes on a real table."""

from __future__ import annotations

from pathlib import Path

from dagster import materialize

from memwal_core.demo import write_demo_table
from memwal_pipelines.definitions import defs, memwal_status
from memwal_pipelines.resources import MemWalTableResource


def test_definitions_resolve() -> None:
    assert defs.resolve_asset_graph().get_all_asset_keys()


def test_status_asset_materializes_metadata(tmp_path: Path) -> None:
    path = tmp_path / "table"
    log = write_demo_table(str(path), base_rows=100, regions=2, rounds=2, rows_per_generation=20)
    result = materialize([memwal_status], resources={"table": MemWalTableResource(uri=str(path))})
    assert result.success
    events = result.get_asset_materialization_events()
    metadata = events[0].materialization.metadata
    assert metadata["regions"].value == len(log.regions)
    assert metadata["pending_generations"].value > 0
