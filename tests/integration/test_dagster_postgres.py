"""The production instance: Dagster's runs, event logs and schedules on a real PostgreSQL.

docs/deploy/dagster-postgres.yaml must stay dagster.yaml but for its storage
(a fast check of the two files), and it must work: a dagster-webserver and a
dagster-daemon on that instance, against a private PostgreSQL cluster from Debian's
package (tests/support/postgres.py), with the code location served by a code server
of its own as docs/deploy/ runs it, merge a table's backlog once its sensor is
switched on, and PostgreSQL itself holds the merge runs, each a success. The
connection comes from DAGSTER_PG_* variables only; the password is in no file or log.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import AssetKey, DagsterInstance
from dagster._core.instance.ref import InstanceRef

from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.support.dagster import PROJECT_ROOT, DagsterDeployment
from tests.support.model import ModelTable, keyed_backlog_table
from tests.support.postgres import PostgresServer

DEPLOY = PROJECT_ROOT / "docs" / "deploy"
POSTGRES_YAML = DEPLOY / "dagster-postgres.yaml"
# The variables the production instance reads, by Dagster's connection field (docs/operations.md).
CONNECTION_ENV = {
    "hostname": "DAGSTER_PG_HOST",
    "port": "DAGSTER_PG_PORT",
    "db_name": "DAGSTER_PG_DB",
    "username": "DAGSTER_PG_USERNAME",
    "password": "DAGSTER_PG_PASSWORD",
}
TABLE = "orders"
# Runs the sensor and the daemon may still advance; a merge run in any of them is not done.
IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def test_postgres_instance_equals_the_default_but_for_storage_read_from_the_environment() -> None:
    default = _load(PROJECT_ROOT / "dagster.yaml")
    production = _load(POSTGRES_YAML)
    storage = production.pop("storage")
    default.pop("storage", None)
    assert production == default, "docs/deploy/dagster-postgres.yaml drifted from dagster.yaml"
    connection = {field: {"env": var} for field, var in CONNECTION_ENV.items()}
    assert storage == {"postgres": {"postgres_db": {**connection, "scheme": "postgresql+psycopg2"}}}, (
        "the PostgreSQL connection must come from the DAGSTER_PG_* variables alone, through psycopg2"
    )


def test_the_example_environment_file_sets_what_the_instance_and_the_tables_read() -> None:
    # Read as a shell reads it (docs/operations.md sources it before `dagster instance info`).
    shell = subprocess.run(
        ["bash", "-c", 'set -a && . "$1" && env -0', "-", str(DEPLOY / "memwal.env.example")],
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    env = dict(item.split("=", 1) for item in shell.stdout.split("\0") if item)
    assert {name for name in env if name.startswith("DAGSTER_PG_")} == set(CONNECTION_ENV.values())
    assert {"DAGSTER_HOME", "MEMWAL_TABLES"} <= env.keys()
    # The runs' warm Spark: the Connect server the systemd unit starts, on its port.
    port = env["MEMWAL_SPARK_REMOTE"].removeprefix("sc://127.0.0.1:")
    unit = (DEPLOY / "memwal-spark-connect.service").read_text()
    assert f"spark.connect.grpc.binding.port={port} " in unit and "binding.address=127.0.0.1" in unit
    options = json.loads(env["EVENTS_STORAGE_OPTIONS"])
    StorageOptions.checked(options)  # every key is one Lance knows
    assert sorted(options) == [
        "allow_http",
        "aws_access_key_id",
        "aws_endpoint",
        "aws_region",
        "aws_secret_access_key",
        "aws_virtual_hosted_style_request",
    ]


@pytest.fixture(scope="module")
def production(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DagsterDeployment, PostgresServer, ModelTable]]:
    with PostgresServer() as server, pytest.MonkeyPatch.context() as patch:
        # This process reads the instance too (DagsterDeployment stamps its schema; the test reads runs).
        for var, value in server.dagster_env(server.create_database("dagster")).items():
            patch.setenv(var, value)
        root = tmp_path_factory.mktemp("dagster-postgres")
        table, _ = keyed_backlog_table(root / TABLE)
        listing = root / "tables.yaml"
        listing.write_text(
            # The instance's storage is the subject here, not Spark: merges run in the run's process.
            f"tables:\n  - {{name: {TABLE}, uri: '{table.uri}', sensor_interval_seconds: 2, merge_engine: local}}\n"
        )
        # Served as docs/deploy/ serves it: memwal-code-server.service's command, docs/deploy/workspace.yaml.
        with DagsterDeployment(listing, instance_yaml=POSTGRES_YAML, code_server=True) as deployment:
            yield deployment, server, table


def pending(table: ModelTable) -> int:
    with MemWalTable.open(table.uri) as opened:
        return status(opened).pending_total


def runs_in_postgres(server: PostgresServer) -> list[tuple[str, str]]:
    """(job name, status) of every run, read from Dagster's `runs` table in PostgreSQL."""
    connection = server.connect("dagster")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pipeline_name, status FROM runs ORDER BY create_timestamp")
            rows: list[tuple[str, str]] = cursor.fetchall()
    finally:
        connection.close()
    return rows


def test_daemon_on_postgres_merges_the_backlog_and_records_its_runs_there(
    production: tuple[DagsterDeployment, PostgresServer, ModelTable],
) -> None:
    deployment, server, table = production
    assert pending(table) > 0
    assert deployment.start_sensor(FLUSHED_SENSOR) == "RUNNING"

    deadline = time.monotonic() + 150
    while True:
        runs = runs_in_postgres(server)
        if runs and not any(state in IN_FLIGHT for _, state in runs) and pending(table) == 0:
            break
        assert time.monotonic() < deadline, (
            f"not merged: {pending(table)} generation(s) pending, runs {runs}; logs in {deployment.root}"
        )
        time.sleep(1.0)
    table.assert_merged()

    merges = [state for job, state in runs if job == f"{TABLE}_merge"]
    assert merges and all(state == "SUCCESS" for state in merges), runs
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(str(deployment.home)))
    try:
        assert type(instance.run_storage).__module__.startswith("dagster_postgres"), instance.run_storage
        merged = instance.get_materialized_partitions(AssetKey([TABLE, "base_table"]))
    finally:
        instance.dispose()
    assert len(merged) == 2, f"each of the two regions has a base_table materialization: {merged}"
    assert not list(deployment.home.rglob("*.db")), "nothing of the instance went to SQLite"
    leaked = [
        str(path)
        for path in deployment.root.rglob("*")
        if path.is_file() and server.password.encode() in path.read_bytes()
    ]
    assert not leaked, f"the PostgreSQL password was written to {leaked}"
    print(
        f"merge runs recorded in PostgreSQL: {len(merges)}; Dagster started in {deployment.startup_seconds:.1f} s"
    )
