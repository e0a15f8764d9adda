"""Shared fixtures: one SparkSession and one S3 server for the whole test session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# First: memwal_core sets Lance's log up (errors only) before any test module loads lance.
import memwal_core  # noqa: F401

# LanceDB ignores LANCE_LOG and floods stderr with warnings otherwise.
os.environ.setdefault("LANCEDB_LOG", "error")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession (local[2,2]: two cores, a failed task retried once; loopback only, no UI)."""
    from memwal_core.spark_session import spark_session

    session = spark_session("local[2,2]", {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """pyspark's bundled Spark Connect server (local[2,2], 127.0.0.1), shared by every test that asks for it."""
    from tests.support.connect import started_connect_server

    with started_connect_server(tmp_path_factory.mktemp("connect")) as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh, empty store root on local disk or in the SeaweedFS bucket."""
    if request.param == "local":
        return str(tmp_path / "store"), {}
    seaweed = request.getfixturevalue("seaweed")
    return f"s3://memwal-test/storage-{uuid.uuid4().hex}", seaweed.storage_options()


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Any]:
    """One real SeaweedFS S3 server for the session, with bucket "memwal-test" created."""
    from tests.support.seaweed import SeaweedServer

    server = SeaweedServer()
    try:
        server.create_bucket("memwal-test")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def standalone_spark() -> Iterator[Any]:
    """A Spark standalone master + worker on loopback, started only when a test asks for it."""
    from tests.support.spark import StandaloneSpark

    cluster = StandaloneSpark()
    try:
        yield cluster
    finally:
        cluster.stop()
