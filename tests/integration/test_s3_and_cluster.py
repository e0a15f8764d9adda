"""End to end on a real S3 server (SeaweedFS) and on a real Spark standalone cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.format.naming import STAGING_DIR
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import SparkEngine
from memwal_core.services.merge.service import merge
from memwal_core.services.merge.staged import ROWS_PER_TASK_ENV
from memwal_core.services.status import status
from tests.support.paths import PROJECT_ROOT


def independent_s3_latest(seaweed: Any, bucket: str, prefix: str, region: str) -> pb.ShardManifest:
    """Latest region manifest found by LISTing with boto3 (a second opinion to memwal's probes)."""
    client = seaweed.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_mem_wal/{region}/manifest/")
    names = [o["Key"].rsplit("/", 1)[-1] for o in listing.get("Contents", [])]
    latest = max(int(n[:64][::-1], 2) for n in names if n.endswith(".binpb"))
    key = f"{prefix}/_mem_wal/{region}/manifest/{format(latest, '064b')[::-1]}.binpb"
    message = pb.ShardManifest()
    message.ParseFromString(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return message


def test_status_and_merge_on_s3(seaweed: Any) -> None:
    prefix = f"tables/{uuid.uuid4().hex}"
    uri = f"s3://memwal-test/{prefix}"
    options = seaweed.storage_options()
    log = write_demo_table(uri, options, base_rows=300, regions=2, rounds=3, rows_per_generation=30)
    with MemWalTable.open(uri, options) as table:
        before = status(table)
        for region in before.regions:
            truth = independent_s3_latest(seaweed, "memwal-test", prefix, region.region)
            assert region.manifest_version == truth.version
            assert region.writer_epoch == truth.writer_epoch
            assert region.flushed_generations == sorted(s.generation for s in truth.sstables)
        assert before.pending_total > 0
        result = merge(table)
        assert not result.failures
        after = status(table)
        assert after.pending_total == 0
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
    assert rows == log.model()


def test_spark_merge_on_s3(seaweed: Any, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executors read generations from S3 and stage their output there; the staging is cleaned up."""
    monkeypatch.setenv(ROWS_PER_TASK_ENV, "16")
    uri = f"s3://memwal-test/tables/{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    log = write_demo_table(uri, options, base_rows=300, regions=2, rounds=2, rows_per_generation=30)
    with MemWalTable.open(uri, options) as table:
        result = merge(table, engine=SparkEngine(spark))
        assert not result.failures and result.generations_merged > 0
        assert status(table).pending_total == 0
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
        assert not table.store.list_files(STAGING_DIR, recursive=True)
    assert rows == log.model()


def test_cli_on_s3_keeps_secrets_out_of_output(seaweed: Any) -> None:
    uri = f"s3://memwal-test/tables/{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    write_demo_table(uri, options, base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    args = [f"-o{k}={v}" for k, v in options.items()]
    proc = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "merge", uri, "--json", *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["generations_merged"] >= 1
    missing = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "status", uri + "-missing", *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
    )
    assert missing.returncode == 2
    for output in (proc.stdout, proc.stderr, missing.stdout, missing.stderr):
        assert seaweed.secret_key not in output and seaweed.access_key not in output


def test_spark_merge_on_standalone_cluster(standalone_spark: Any, tmp_path: Path) -> None:
    # A relative table path: the driver runs in tmp_path, the executors elsewhere.
    uri = "t"
    log = write_demo_table(str(tmp_path / uri), base_rows=500, regions=2, rounds=3, rows_per_generation=50)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memwal_core.cli.main",
            "merge",
            uri,
            "--engine",
            "spark",
            "--spark-master",
            standalone_spark.master_url,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        # Few rows per task: the region is split over several executor tasks.
        env={**os.environ, ROWS_PER_TASK_ENV: "40", "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(proc.stdout)
    assert payload["engine"] == "spark" and not payload["failures"]
    table = MemWalTable(str(tmp_path / uri))
    rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
    assert rows == log.model()
    assert not table.store.list_files(STAGING_DIR), "staged collapse output must be removed after the commit"
