"""The location's one resource: tables by name, storage options from each table's variable."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.engine import LocalEngine
from memwal_pipelines.config import TableConfig
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
