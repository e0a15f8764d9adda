"""The location's one resource: the pipeline's Spark, storage options from each table's variable."""

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


def test_one_resource_for_every_table_of_one_spark_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster merges the definitions of two components only when they share the resource object."""
    monkeypatch.delenv("MEMWAL_SPARK_REMOTE", raising=False)
    monkeypatch.setenv("MEMWAL_SPARK_MASTER", "spark://h:7077")
    assert memwal_resource() is memwal_resource()
    monkeypatch.setenv("MEMWAL_SPARK_MASTER", "spark://h:7078")
    assert memwal_resource().pyspark.spark_config["spark.master"] == "spark://h:7078"


def test_a_local_run_gets_a_local_engine_and_no_session() -> None:
    memwal = memwal_resource()
    assert isinstance(memwal.engine(TABLES[0], "local"), LocalEngine)
    with pytest.raises(BadInputError, match="unknown engine 'flink'"):
        memwal.engine(TABLES[0], "flink")


def test_storage_options_come_from_the_tables_variable_and_never_echo_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memwal = memwal_resource()
    events, orders = TABLES
    assert dict(memwal.storage_options(orders)) == {}
    monkeypatch.setenv("EVENTS_OPTS", '{"aws_region": "eu-west-1", "aws_secret_access_key": "s3cr3t"}')
    assert memwal.storage_options(events)["aws_region"] == "eu-west-1"
    for bad in ('["s3cr3t"]', "aws_secret_access_key=s3cr3t", '{"aws_secret_acess_key": "s3cr3t"}'):
        monkeypatch.setenv("EVENTS_OPTS", bad)
        with pytest.raises(BadInputError) as refused:
            memwal.storage_options(events)
        assert "s3cr3t" not in str(refused.value) and "\n" not in str(refused.value)


def test_a_table_names_a_master_or_a_remote_never_both(tmp_path: Path) -> None:
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        "tables:\n  - name: t\n    uri: /t\n    spark_master: local[1]\n    spark_remote: sc://127.0.0.1:15002\n"
    )
    with pytest.raises(BadInputError) as refused:
        load_tables(str(listing))
    assert "not both" in str(refused.value) and "\n" not in str(refused.value)


def test_the_pipeline_spark_config_names_the_connect_server_or_a_classic_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MEMWAL_SPARK_MASTER", raising=False)
    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", "sc://127.0.0.1:15002")
    # By the variable's name: a token in the URL never enters the config Dagster shows.
    assert memwal_resource().pyspark.spark_config == {"memwal.spark.remote.env": "MEMWAL_SPARK_REMOTE"}
    monkeypatch.delenv("MEMWAL_SPARK_REMOTE")
    monkeypatch.setenv("MEMWAL_SPARK_MASTER", "spark://h:7077")
    config = memwal_resource().pyspark.spark_config
    assert config["spark.master"] == "spark://h:7077" and "spark.remote" not in config
    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", "sc://127.0.0.1:15002")
    with pytest.raises(BadInputError, match="not both"):
        memwal_resource()
