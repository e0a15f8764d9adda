"""GC under Dagster on an S3 (and an Azure) table whose credentials come as storage options (issue 28, item 1).

Lance 14's point lookup opens generation datasets without the table's storage
options, so the blocking `lsm_consistency` check failed on every S3 table with
a backlog and GC never ran there. The check now reads its probes through the
LSM scan, which does pass them (docs/lance-issues.md).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from dagster import DagsterInstance

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig


@pytest.mark.parametrize(("store", "server"), [("s3", "seaweed"), ("azure", "azurite")])
def test_gc_job_checks_and_collects_an_object_store_table_with_a_backlog(
    store: str, server: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    found: Any = request.getfixturevalue(server)
    uri = f"{found.scheme}://memwal-test/gc-{uuid.uuid4().hex}"
    options = found.storage_options()
    write_demo_table(uri, StorageOptions(options))
    monkeypatch.setenv("GC_S3_OPTIONS", json.dumps(options))
    table = TableConfig(name="t", uri=uri, storage_options_env="GC_S3_OPTIONS")
    with MemWalTable.open(uri, options) as opened:
        assert status(opened).pending_total > 0, "the check has pending generations to look up"

    result = (
        build_definitions([table])
        .resolve_job_def("t_gc")
        .execute_in_process(instance=DagsterInstance.ephemeral(), raise_on_error=False)
    )
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    consistency = evaluations["lsm_consistency"]
    assert consistency.passed, consistency.metadata
    assert consistency.metadata["sampled_keys"].value > 0
    assert result.success
    assert [e.asset_key.path[-1] for e in result.get_asset_materialization_events()] == ["gc_report"]
