"""Every service's result on a real table: the seven common fields, and strict JSON (the `--json` contract)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq

from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.compact import compact
from memwal_core.services.consistency import check_consistency
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.ingest.service import ingest
from memwal_core.services.initialize import RegionSpecChoice, initialize
from memwal_core.services.merge.service import merge
from memwal_core.services.result import ServiceResult
from memwal_core.services.retain import retain
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.status import status
from tests.support.schema import SCHEMA, make_table, source_rows
from tests.unit.services.results import service_result_types

COMMON = {"table", "read_version", "new_version", "dry_run", "failures", "seconds", "throttled"}


def assert_contract(result: ServiceResult, uri: str) -> dict[str, object]:
    """The result's JSON, strict (no NaN), with the common fields typed as documented."""
    payload = json.loads(json.dumps(result.to_json(), allow_nan=False))
    name = type(result).__name__
    assert payload.keys() >= COMMON, (name, COMMON - payload.keys())
    assert payload["table"] == uri, name
    assert isinstance(payload["read_version"], int) and payload["read_version"] >= 1, name
    assert payload["new_version"] is None or payload["new_version"] > payload["read_version"], name
    assert isinstance(payload["dry_run"], bool) and payload["failures"] == [], name
    assert isinstance(payload["seconds"], float) and payload["seconds"] >= 0, name
    assert payload["throttled"] == {"responses": 0, "seconds": 0.0}, f"{name}: local disk never throttles"
    if payload["dry_run"]:
        assert payload["new_version"] is None, f"{name}: a dry run commits nothing"
    return payload


def test_every_service_reports_the_common_fields_as_strict_json(tmp_path: Path) -> None:
    plain = str(tmp_path / "plain")
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), plain)
    uri = make_table(tmp_path / "t")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    pq.write_table(source_rows(400).cast(SCHEMA), tmp_path / "rows.parquet")
    results: list[ServiceResult] = []
    with MemWalTable(plain) as table:
        results.append(initialize(table, ["id"], RegionSpecChoice(unsharded=True)))
    assert_contract(results[-1], plain)
    with MemWalTable.open(uri) as table:
        results.append(ingest(table, [str(tmp_path / "rows.parquet")]))
    with MemWalTable.open(uri) as table:
        results += [
            status(table),
            check_consistency(table),
            merge(table, dry_run=True),
            # Region by region: each commit leaves a fragment, so compaction has work.
            *(merge(table, regions=[region]) for region in table.region_ids()),
            catchup(table, dry_run=True),
            catchup(table),
            build_snapshot(table),
            compact(table, dry_run=True),
            compact(table, target_rows_per_fragment=10_000),
            retain(table, older_than=timedelta(0), force=True),
            gc(table, dry_run=True, policy=GcPolicy(grace_seconds=0)),
            gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0)),
        ]
    payloads = {type(r).__name__: assert_contract(r, uri) for r in results[1:]}
    assert {type(r) for r in results} == service_result_types(), "a service without a contract test"
    committed = [r for r in results if r.new_version is not None]
    assert {type(r).__name__ for r in committed} >= {
        "InitResult",
        "MergeResult",
        "CatchupResult",
        "SnapshotResult",
        "CompactionResult",
    }
    assert payloads["MergeResult"]["generations_merged"] > 0 and payloads["CompactionResult"]["tasks"] > 0
    assert payloads["GcResult"]["deleted"], "the last GC deleted the merged generations"
