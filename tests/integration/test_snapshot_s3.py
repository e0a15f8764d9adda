"""Snapshot, stored-snapshot reads, the MemWAL-aware reader and catch-up on a real S3 server."""

from __future__ import annotations

import uuid
from typing import Any

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.merge.service import merge
from memwal_core.services.reader import lsm_scanner, plan_read
from memwal_core.services.snapshot.service import build_snapshot
from memwal_core.services.snapshot.stored import read_stored_snapshot


def test_snapshot_reader_and_catchup_on_s3(seaweed: Any) -> None:
    prefix = f"tables/{uuid.uuid4().hex}"
    uri = f"s3://memwal-test/{prefix}"
    options = seaweed.storage_options()
    log = write_demo_table(uri, options, base_rows=100, regions=2, rounds=2, rows_per_generation=20)
    with MemWalTable.open(uri, options) as table:
        table.dataset().create_scalar_index("score", "BTREE", name="score_idx")
        result = build_snapshot(table, inline_threshold=1)
        assert result.storage == "file" and result.regions == 2
        head = seaweed.client().head_object(Bucket="memwal-test", Key=f"{prefix}/{result.path}")
        assert head["ContentLength"] == result.snapshot_bytes
        assert merge(table, max_generations=1).failures == []

        stored = read_stored_snapshot(table, table.index_details())
        manifests = table.read_regions()
        for row in stored.rows:
            manifest = manifests[row.region]
            assert manifest is not None
            assert (row.version, row.writer_epoch, row.current_generation) == (
                manifest.version,
                manifest.writer_epoch,
                manifest.current_generation,
            )
            assert [g for g, _p in row.generations] == manifest.generation_numbers

        model = log.model()
        for plan in (
            plan_read(table),
            plan_read(table, from_snapshot=True),
            plan_read(table, index="score_idx"),
        ):
            rows = lsm_scanner(table, plan).project(["id", "name", "score"]).to_table().to_pylist()
            assert {r["id"]: (r["name"], r["score"]) for r in rows} == model

        caught = catchup(table)
        assert [r.method for r in caught.indexes] == ["optimize"]
        details = table.index_details()
        assert details.index_catchup["score_idx"] == details.merged
