"""Region manifests and index details written by pylance's native writer, and `status`.

pylance is the oracle: the table is written by Lance's own MemWAL writer, merge
progress by Lance's own marked merge_insert, and every answer of memwal is
compared with an independent decoding of the files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import CompactedSsTable

from memwal_core.demo import DemoLog, write_demo_table
from memwal_core.format.index_details import read_index_details
from memwal_core.format.naming import table_manifest_name
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.model import table as table_module
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from tests.support.tables import independent_latest_manifest


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoLog]:
    path = tmp_path_factory.mktemp("status") / "table"
    log = write_demo_table(str(path), base_rows=600, regions=3, rounds=4, rows_per_generation=60)
    return path, log


def test_every_region_manifest_round_trips_byte_for_byte(demo: tuple[Path, DemoLog]) -> None:
    path, log = demo
    count = 0
    for region in log.regions:
        manifest_dir = path / "_mem_wal" / region / "manifest"
        for name in os.listdir(manifest_dir):
            if not name.endswith(".binpb"):
                continue
            data = (manifest_dir / name).read_bytes()
            message = pb.ShardManifest()
            message.ParseFromString(data)
            assert message.SerializeToString() == data, name
            count += 1
    assert count >= 3 * 5


def test_index_details_round_trip_and_match_lance(demo: tuple[Path, DemoLog]) -> None:
    path, _log = demo
    dataset = lance.dataset(str(path))
    data = (path / "_versions" / table_manifest_name(dataset.version)).read_bytes()
    details = read_index_details(data, where=str(path))
    assert details is not None
    assert details.to_proto().SerializeToString() == details.raw
    config = dataset.mem_wal_index_details()
    assert config is not None
    assert details.maintain_all_indexes == config["maintain_all_indexes"]
    assert list(details.maintained_indexes) == config["maintained_indexes"]
    assert details.num_regions == config["num_shards"]


def test_a_versions_details_are_read_once_and_only_the_latest_versions_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "table"
    write_demo_table(str(path), base_rows=100, regions=2, rounds=1, rows_per_generation=20)
    with MemWalTable.open(str(path)) as merging:
        assert merge(merging).new_version is not None  # a second version with MemWAL details
    table = MemWalTable(str(path))
    latest = table.latest_version()
    reads = table.store.stats
    reads.reset()
    first = table.index_details(latest)
    assert table.index_details(latest) is first and table.index_details() is first
    assert reads.snapshot().get("get") == 1, reads.snapshot()

    monkeypatch.setattr(table_module, "DETAILS_KEPT", 1)
    reads.reset()
    older = table.index_details(latest - 1)  # evicts the latest: one version kept
    assert older.table_version == latest - 1
    assert table.index_details(latest).raw == first.raw
    assert table.index_details(latest).raw == first.raw
    assert reads.snapshot().get("get") == 2, reads.snapshot()

    table.close()
    reads.reset()
    table.index_details(latest)
    assert reads.snapshot().get("get") == 1, "close() keeps no details"


def test_status_equals_the_region_manifests(demo: tuple[Path, DemoLog]) -> None:
    path, log = demo
    result = status(MemWalTable.open(str(path)))
    assert [r.region for r in result.regions] == sorted(log.regions)
    epochs = []
    for region in result.regions:
        truth = independent_latest_manifest(path, region.region)
        assert region.manifest_version == truth.version
        assert region.writer_epoch == truth.writer_epoch
        assert region.current_generation == truth.current_generation
        assert region.flushed_generations == sorted(s.generation for s in truth.sstables)
        assert region.merged_generation == 0
        assert region.pending_generations == region.flushed_generations
        assert len(region.flushed_generations) >= 4
        epochs.append(region.writer_epoch)
    assert max(epochs) >= 2, "the demo re-claims one region, so one epoch is above 1"


def test_status_reports_merge_progress_committed_by_lance(tmp_path: Path) -> None:
    path = tmp_path / "table"
    log = write_demo_table(str(path), base_rows=300, regions=2, rounds=3, rows_per_generation=40)
    region = sorted(log.regions)[0]
    # Lance's own marked merge_insert records progress: merge nothing, mark generation 2.
    dataset = lance.dataset(str(path))
    empty = pa.table(
        {
            "id": pa.array([], pa.int64()),
            "name": pa.array([], pa.string()),
            "score": pa.array([], pa.float64()),
        },
        schema=dataset.schema,
    )
    (
        dataset.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .mark_sstables_as_compacted([CompactedSsTable(region, 2)])
        .execute(empty)
    )
    result = status(MemWalTable.open(str(path)))
    by_id = {r.region: r for r in result.regions}
    assert by_id[region].merged_generation == 2
    assert by_id[region].pending_generations == [g for g in by_id[region].flushed_generations if g > 2]
    other = sorted(log.regions)[1]
    assert by_id[other].merged_generation == 0
    assert result.read_version == lance.dataset(str(path)).version


def test_status_json_contract(demo: tuple[Path, DemoLog]) -> None:
    path, _log = demo
    proc = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "status", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    payload = json.loads(proc.stdout)
    assert payload["table"] == str(path)
    assert isinstance(payload["version"], int)
    assert payload["index_catchup"] == {}
    regions = payload["regions"]
    assert [r["region"] for r in regions] == sorted(r["region"] for r in regions)
    for r in regions:
        for key in ("manifest_version", "writer_epoch", "current_generation", "merged_generation"):
            assert isinstance(r[key], int)
        assert r["flushed_generations"] == sorted(r["flushed_generations"])
        assert r["pending_generations"] == [g for g in r["flushed_generations"] if g > r["merged_generation"]]
