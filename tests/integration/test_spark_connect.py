"""The Spark engine on Spark Connect: pyspark's own server on 127.0.0.1, the same code as a classic session.

Merge (both commit forms), the `memwal` command naming the server, the engine
contract, and a server killed mid-merge. Compaction and ingestion through
Connect are in their own test files, beside their classic runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memwal_core.connect_server import ConnectServer
from memwal_core.demo import write_demo_table
from memwal_core.errors import BadInputError
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import SINGLE, TWO_STEP
from memwal_core.services.engine import Engine, SparkEngine
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from memwal_core.spark_session import shared_session_ids
from memwal_pipelines.resources import pipeline_spark_config
from memwal_pipelines.warm_spark import warm_home, warm_spark
from tests.support.cli import run_cli
from tests.support.connect import started_connect_server
from tests.support.engines import check_engine_contract, merge_engine
from tests.support.model import keyed_backlog_table
from tests.support.paths import PROJECT_ROOT
from tests.support.service import free_ports
from tests.support.tables import progress


@pytest.fixture(params=["connect"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    return merge_engine(request, monkeypatch, rows_per_task=8)


def test_engine_contract_on_a_connect_session(connect_server: Any, engine: Engine) -> None:
    check_engine_contract(engine)
    assert engine.parallelism() == 2  # the server's local[2,2]

    def where(_item: int) -> int:
        return os.getpid()

    assert os.getpid() not in engine.run(where, list(range(4)), what="pids"), "a task ran in the client"


@pytest.mark.parametrize("form", [SINGLE, TWO_STEP])
def test_merge_through_connect_equals_the_model(tmp_path: Path, engine: Engine, form: str) -> None:
    table, regions = keyed_backlog_table(tmp_path / "t", regions=3, rounds=2)
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, engine=engine, commit_form=form)
        after = status(opened)
    assert not result.failures and result.engine == "spark"
    assert {r.region for r in result.regions} == set(regions)
    assert after.pending_total == 0
    table.assert_merged()
    assert not MemWalTable(table.uri).store.list_files(STAGING_DIR), "staged collapse output is left behind"


def test_cli_merges_the_demo_table_on_a_connect_server(tmp_path: Path, connect_server: Any) -> None:
    log = write_demo_table(str(tmp_path / "demo"), base_rows=300, regions=3, rounds=2, rows_per_generation=40)
    done = run_cli("merge", "demo", "--engine", "spark", "--spark-remote", connect_server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(spark engine)" in done.stdout
    noise = [line for line in done.stderr.splitlines() if not line.startswith("region ")]
    assert noise == [], "a normal run prints only its progress on stderr (no Spark banner, no warnings)"
    rows = {
        r["id"]: (r["name"], r["score"])
        for r in MemWalTable(str(tmp_path / "demo")).dataset().to_table().to_pylist()
    }
    assert rows == log.model()


def test_the_connect_servers_memory_is_a_budget_from_its_start(connect_server: Any) -> None:
    """A heap that grows in steps over an hour looks like a leak; one touched at start is a flat budget.
    Past the heap, the classes Spark compiles per query are unloaded by a whole collection every 5
    minutes, and malloc keeps two arenas, not one per thread Spark's pools ever started."""
    status = Path(f"/proc/{connect_server.pid}/status").read_text()
    resident = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert resident is not None
    resident_kib = int(resident.group(1))
    assert resident_kib >= 1024 * 1024, (
        f"the server holds {resident_kib // 1024} MiB, less than its 1 GiB heap"
    )
    command = Path(f"/proc/{connect_server.pid}/cmdline").read_text().split("\0")
    assert "-Xmx1g" in command and "-Xms1g" in command and "-XX:+AlwaysPreTouch" in command
    assert "spark.cleaner.periodicGC.interval=5min" in command
    environment = Path(f"/proc/{connect_server.pid}/environ").read_bytes().split(b"\0")
    assert b"MALLOC_ARENA_MAX=2" in environment


def test_master_and_remote_named_together_is_one_line_of_bad_input(tmp_path: Path) -> None:
    write_demo_table(str(tmp_path / "demo"), base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    both = ("--spark-master", "local[1]", "--spark-remote", "sc://127.0.0.1:1")
    for command in ("merge", "compact"):
        done = run_cli(command, "demo", *both, cwd=tmp_path)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert "not both" in done.stderr
    env_both = {"MEMWAL_SPARK_MASTER": "local[1]", "MEMWAL_SPARK_REMOTE": "sc://127.0.0.1:1"}
    done = run_cli("merge", "demo", "--engine", "spark", cwd=tmp_path, env=env_both)
    assert done.returncode == 2 and "MEMWAL_SPARK_MASTER or MEMWAL_SPARK_REMOTE" in done.stderr, done.stderr
    with pytest.raises(BadInputError, match="not both"):
        SparkEngine(master="local[1]", remote="sc://127.0.0.1:1")
    with pytest.raises(BadInputError, match="sc://"):
        SparkEngine(remote="spark://127.0.0.1:7077")


def _python_workers_of(pid: int) -> list[int]:
    """PySpark Python workers under the JVM `pid` (its children running pyspark's daemon or worker)."""
    workers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and "pyspark" in command:
            workers.append(int(entry.name))
    return workers


def test_connect_server_killed_mid_merge_one_error_progress_kept_rerun_converges(
    tmp_path: Path, connect_server: Any
) -> None:
    uri = str(tmp_path / "demo")
    log = write_demo_table(uri, base_rows=20_000, regions=3, rounds=4, rows_per_generation=3000)
    before = progress(uri)
    version = MemWalTable(uri).dataset().version
    with started_connect_server(tmp_path / "doomed") as doomed:
        server_pid = doomed.pid
        assert server_pid is not None
        merging = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memwal_core.cli.main",
                "merge",
                uri,
                "--engine",
                "spark",
                "--spark-remote",
                doomed.url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "MEMWAL_SPARK_ROWS_PER_TASK": "2000"},
        )
        deadline = time.monotonic() + 300
        while not _python_workers_of(server_pid) and merging.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert merging.poll() is None, "the merge ended before its tasks ran: nothing was killed mid-merge"
        os.kill(server_pid, signal.SIGKILL)
        stdout, stderr = merging.communicate(timeout=300)
    assert merging.returncode == 1, (stdout, stderr)
    assert len(stderr.splitlines()) == 1 and "Spark" in stderr, stderr
    assert progress(uri) == before and MemWalTable(uri).dataset().version == version
    done = run_cli("merge", uri, "--engine", "spark", "--spark-remote", connect_server.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = progress(uri)
    assert all(after[r] > before[r] for r in before)
    rows = {r["id"]: (r["name"], r["score"]) for r in MemWalTable(uri).dataset().to_table().to_pylist()}
    assert rows == log.model()


def test_a_live_warm_server_is_reused_and_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `demo` or `python -m memwal_pipelines spark` find in DAGSTER_HOME: used by runs, not stopped by them."""
    for variable in ("MEMWAL_SPARK_REMOTE", "MEMWAL_SPARK_MASTER"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert pipeline_spark_config()["spark.master"], "no warm server: a classic session"
    with started_connect_server(warm_home(tmp_path)) as running:
        assert pipeline_spark_config() == {"spark.remote": running.url}
        with warm_spark(tmp_path) as url:
            assert url == running.url and os.environ["MEMWAL_SPARK_REMOTE"] == url
        assert running.running(), "a command stopped a server it did not start"
        assert "MEMWAL_SPARK_REMOTE" not in os.environ
    assert ConnectServer.find(warm_home(tmp_path)) is None


def test_the_environment_names_the_engine_as_the_command_line_does(tmp_path: Path) -> None:
    """MEMWAL_SPARK_REMOTE alone selects Spark for the rounds worth it: a small one merges in this process
    without importing pyspark (the server is down and never asked), and says why; with the threshold at 0
    the round goes to Spark and fails in one line, changing nothing."""
    uri = str(tmp_path / "demo")
    write_demo_table(uri, base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    version = MemWalTable(uri).dataset().version
    dead = {"MEMWAL_SPARK_REMOTE": f"sc://127.0.0.1:{free_ports(1)[0]}"}
    forced = run_cli("merge", "demo", "--spark-min-rows", "0", cwd=tmp_path, env=dead)
    assert forced.returncode == 1 and len(forced.stderr.strip().splitlines()) == 1, forced.stderr
    assert dead["MEMWAL_SPARK_REMOTE"].removeprefix("sc://") in forced.stderr
    assert MemWalTable(uri).dataset().version == version, "a failed merge committed"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memwal_core.cli.main", "merge", "demo", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **dead, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(done.stdout)
    assert payload["engine"] == "local" and payload["generations_merged"] > 0
    assert re.fullmatch(
        r"\d+ rows < spark_min_rows 500,000 and 0\.0 MiB < spark_min_bytes 256 MiB", payload["engine_reason"]
    ), payload["engine_reason"]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "pyspark" not in imported and "memwal_core.services.merge.collapse" in imported
    refused = run_cli("merge", "demo", "--engine", "spark", "--spark-min-rows", "0", cwd=tmp_path, env=dead)
    assert refused.returncode == 2 and "not with --engine" in refused.stderr, refused.stderr


def test_memwal_clients_of_a_server_share_one_session_and_its_warm_workers(connect_server: Any) -> None:
    """Runs join one session per server (so its Python workers outlive a run); one ending leaves it to the
    others, and a session the server closed is replaced by the hour's."""
    first, second = SparkEngine(remote=connect_server.url), SparkEngine(remote=connect_server.url)
    shared = shared_session_ids(connect_server.url)
    assert first.session.session_id == second.session.session_id == shared[0]

    def loaded(_item: int) -> bool:
        return "lance" in sys.modules  # imported by memwal's daemon before the worker forked

    assert first.run(loaded, [0, 1], what="imports") == [True, True]
    first.close()
    assert second.run(loaded, [0], what="after another client ended") == [True]
    second.session.stop()  # releases it on the server: nobody can join it again
    third = SparkEngine(remote=connect_server.url)
    try:
        assert third.session.session_id == shared[1]
        assert third.run(loaded, [0], what="on the hour's session") == [True]
    finally:
        third.close()
