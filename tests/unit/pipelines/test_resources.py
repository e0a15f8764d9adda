"""The location's one resource: tables by name, storage options from each table's variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.engine import LocalEngine
from memwal_pipelines.config import TableConfig, load_tables
from memwal_pipelines.resources import memwal_resource

TABLES = [
    TableConfig(
        name="events", uri="s3://b/events", storage_options_env="EVENTS_OPTS", spark_master="spark://h:7077"
    ),
    TableConfig(name="orders", uri="/data/orders"),
]


def test_every_table_by_name_with_its_own_master() -> None:
    memwal = memwal_resource(TABLES)
    assert memwal.location("events").spark_master == "spark://h:7077"
    assert (memwal.location("orders").uri, memwal.location("orders").spark_master) == ("/data/orders", None)
    with pytest.raises(BadInputError, match="maintains no table 'invoices'"):
        memwal.open("invoices")


def test_a_local_run_gets_a_local_engine_and_no_session() -> None:
    memwal = memwal_resource(TABLES)
    assert isinstance(memwal.engine("events", "local"), LocalEngine)
    with pytest.raises(BadInputError, match="unknown engine 'flink'"):
        memwal.engine("events", "flink")


def test_storage_options_come_from_the_tables_variable_and_never_echo_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memwal = memwal_resource(TABLES)
    assert dict(memwal.storage_options("orders")) == {}
    monkeypatch.setenv("EVENTS_OPTS", '{"aws_region": "eu-west-1", "aws_secret_access_key": "s3cr3t"}')
    assert memwal.storage_options("events")["aws_region"] == "eu-west-1"
    for bad in ('["s3cr3t"]', "aws_secret_access_key=s3cr3t", '{"aws_secret_acess_key": "s3cr3t"}'):
        monkeypatch.setenv("EVENTS_OPTS", bad)
        with pytest.raises(BadInputError) as refused:
            memwal.storage_options("events")
        assert "s3cr3t" not in str(refused.value) and "\n" not in str(refused.value)


def test_a_table_names_a_master_or_a_remote_never_both(tmp_path: Path) -> None:
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        "tables:\n  - name: t\n    uri: /t\n    spark_master: local[1]\n    spark_remote: sc://127.0.0.1:15002\n"
    )
    with pytest.raises(BadInputError) as refused:
        load_tables(str(listing))
    assert "not both" in str(refused.value) and "\n" not in str(refused.value)
    remote = TableConfig(name="r", uri="/r", spark_remote="sc://127.0.0.1:15002")
    assert memwal_resource([remote]).location("r").spark_remote == "sc://127.0.0.1:15002"


def test_the_pipeline_spark_config_names_the_connect_server_or_a_classic_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MEMWAL_SPARK_MASTER", raising=False)
    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", "sc://127.0.0.1:15002")
    # By the variable's name: a token in the URL never enters the config Dagster shows.
    assert memwal_resource(TABLES).pyspark.spark_config == {"memwal.spark.remote.env": "MEMWAL_SPARK_REMOTE"}
    monkeypatch.delenv("MEMWAL_SPARK_REMOTE")
    monkeypatch.setenv("MEMWAL_SPARK_MASTER", "spark://h:7077")
    config = memwal_resource(TABLES).pyspark.spark_config
    assert config["spark.master"] == "spark://h:7077" and "spark.remote" not in config
    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", "sc://127.0.0.1:15002")
    with pytest.raises(BadInputError, match="not both"):
        memwal_resource(TABLES)
