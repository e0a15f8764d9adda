"""The test servers behave as the rest of the suite assumes.

Other tests rely on SeaweedFS for S3 semantics (conditional puts above all)
and on Spark executors being able to `import lance`; if either assumption
breaks, these tests say so directly instead of through a confusing failure
elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support import watchdog
from tests.support.paths import PROJECT_ROOT
from tests.support.seaweed import SeaweedServer
from tests.support.spark import StandaloneSpark, lance_probe, local_spark_session, write_probe_dataset


def _status(exc: Exception) -> int:
    """HTTP status of a botocore ClientError."""
    return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])  # type: ignore[attr-defined]


@pytest.mark.s3
def test_seaweed_accepts_only_its_own_keys(seaweed: SeaweedServer) -> None:
    import boto3
    from botocore.exceptions import ClientError

    assert seaweed.endpoint.startswith("http://127.0.0.1:")
    names = [bucket["Name"] for bucket in seaweed.client().list_buckets()["Buckets"]]
    assert "memwal-test" in names

    intruder = boto3.client(
        "s3",
        endpoint_url=seaweed.endpoint,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=seaweed.region,
    )
    with pytest.raises(ClientError) as info:
        intruder.list_buckets()
    assert info.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert _status(info.value) == 403


@pytest.mark.s3
def test_seaweed_conditional_put_if_none_match(seaweed: SeaweedServer) -> None:
    from botocore.exceptions import ClientError

    client = seaweed.client()
    key = f"support/{uuid.uuid4().hex}"
    created = client.put_object(Bucket="memwal-test", Key=key, Body=b"first", IfNoneMatch="*")
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 200

    with pytest.raises(ClientError) as info:
        client.put_object(Bucket="memwal-test", Key=key, Body=b"second", IfNoneMatch="*")
    assert _status(info.value) == 412
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket="memwal-test", Key=key)["Body"].read() == b"first"


@pytest.mark.s3
def test_s3fs_create_mode_on_existing_key_is_einval_not_file_exists(seaweed: SeaweedServer) -> None:
    """Pins a pitfall: s3fs maps a 412 to FileExistsError only when the error names the
    `If-None-Match` condition, as AWS does; SeaweedFS omits it, so s3fs raises a plain
    OSError(EINVAL) whose __cause__ is the botocore 412. Callers must handle both."""
    import s3fs
    from botocore.exceptions import ClientError

    fs = s3fs.S3FileSystem(**seaweed.s3fs_kwargs())
    path = f"memwal-test/support/{uuid.uuid4().hex}"
    fs.pipe_file(path, b"first", mode="create")

    with pytest.raises(OSError) as info:
        fs.pipe_file(path, b"second", mode="create")
    assert type(info.value) is OSError
    assert info.value.errno == errno.EINVAL
    cause = info.value.__cause__
    assert isinstance(cause, ClientError)
    assert _status(cause) == 412
    assert fs.cat_file(path) == b"first"


@pytest.mark.s3
def test_lance_round_trip_over_s3(seaweed: SeaweedServer) -> None:
    import lance
    import pyarrow as pa

    prefix = f"support-{uuid.uuid4().hex}"
    uri = f"s3://memwal-test/{prefix}/x"
    options = seaweed.storage_options()
    lance.write_dataset(pa.table({"value": list(range(5))}), uri, storage_options=options)
    lance.write_dataset(pa.table({"value": [10, 11]}), uri, mode="append", storage_options=options)

    dataset = lance.dataset(uri, storage_options=options)
    assert dataset.version == 2
    assert sorted(dataset.to_table().column("value").to_pylist()) == [0, 1, 2, 3, 4, 10, 11]
    listed = seaweed.client().list_objects_v2(Bucket="memwal-test", Prefix=f"{prefix}/x/_versions/")
    assert listed.get("KeyCount", 0) == 2


def _lives(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.s3
def test_servers_die_with_the_test_process() -> None:
    """A test process killed from outside leaves no server behind: SeaweedFS, started by a child
    interpreter through the support module, is gone within seconds of `kill -9` of that child."""
    started = (
        "import time; from tests.support.seaweed import SeaweedServer; server = SeaweedServer(); "
        "print(server.pid, server.root, flush=True); time.sleep(600)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", started],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None
    pid_text, _, root = child.stdout.readline().strip().partition(" ")
    pid = int(pid_text)
    try:
        assert _lives(pid)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        while _lives(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _lives(pid), "SeaweedFS outlived the test process that started it"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        child.stdout.close()


@pytest.mark.parametrize("same_process", [True, False])
def test_the_watchdog_ends_a_group_only_while_its_server_runs_in_it(same_process: bool) -> None:
    """At end of file the watchdog ends a listed group if the listed process, started when it was
    listed, still runs in it; a PID reused since (here: a wrong start time) is someone else's."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        start = watchdog.started(sleeper.pid) if same_process else "0"
        watching = subprocess.Popen([sys.executable, "-I", watchdog.__file__], stdin=subprocess.PIPE)
        watching.communicate(f"+{sleeper.pid} {sleeper.pid} {start}\n".encode(), timeout=30)
        assert (sleeper.poll() is not None) is same_process
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.s3
def test_seaweed_stop_kills_by_pid_and_cleans_up() -> None:
    server = SeaweedServer()
    pid, root = server.pid, server.root
    assert pid is not None
    assert server.startup_seconds is not None
    assert (root / "weed.log").exists()
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not root.exists()
    assert not [
        port for port in server.ports.values() if Path(f"/tmp/seaweedfs-s3-grpc-{port}.sock").exists()
    ]


@pytest.mark.s3
def test_seaweed_and_postgres_come_back_after_a_crash_with_their_data() -> None:
    """bench/chaos.py kills them with kill -9 and restarts them as their units would: same port, same
    data (what was acknowledged before the crash is there after it)."""
    from tests.support.postgres import PostgresServer

    with SeaweedServer() as server, PostgresServer() as postgres:
        server.create_bucket("crash")
        server.client().put_object(Bucket="crash", Key="k", Body=b"acknowledged")
        postgres.create_database("kept")
        endpoint, port, pids = server.endpoint, postgres.port, (server.pid, postgres.pid)
        server.crash()
        postgres.crash()
        for pid in pids:
            assert pid is not None
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        server.restart()
        postgres.restart()
        assert (server.endpoint, postgres.port) == (endpoint, port)
        assert server.client().get_object(Bucket="crash", Key="k")["Body"].read() == b"acknowledged"
        postgres.connect("kept").close()


def _assert_probe_rows(rows: list[dict[str, Any]], uri: str, expected_total: int) -> dict[str, Any]:
    import lance

    assert len(rows) == 1
    row = rows[0]
    assert row["uri"] == uri
    assert row["rows"] == 10
    assert row["total"] == expected_total
    assert row["lance_version"] == lance.__version__
    assert row["pid"] != os.getpid()
    return row


@pytest.mark.spark
def test_local_spark_executors_import_lance(spark: Any, tmp_path: Path) -> None:
    assert local_spark_session() is spark
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    uri = str(tmp_path / "probe.lance")
    expected = write_probe_dataset(uri, rows=10)
    _assert_probe_rows(lance_probe(spark, [uri]), uri, expected)


@pytest.mark.spark
def test_standalone_spark_executors_import_lance(standalone_spark: StandaloneSpark, tmp_path: Path) -> None:
    """The costly one (two daemons, a driver JVM and an executor JVM): a single tiny job."""
    status = standalone_spark.status()
    assert status["aliveworkers"] >= 1
    assert {worker["host"] for worker in status["workers"]} == {"127.0.0.1"}
    assert standalone_spark.master_url.startswith("spark://127.0.0.1:")

    uri = str(tmp_path / "probe.lance")
    expected = write_probe_dataset(uri, rows=10)
    row = _assert_probe_rows(standalone_spark.run_lance_probe([uri]), uri, expected)
    assert row["pid"] != row["driver_pid"]
    assert standalone_spark.status()["completedapps"][-1]["name"] == "memwal-lance-probe"
