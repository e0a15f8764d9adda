"""Shared fixtures: one SparkSession, one S3 server and one Azure server for the whole test session.

The `s3`, `azure`, `spark` and `soak` markers are given here, from what a test uses, so
`-m "not s3"` (or azure, spark, soak) slices the suite without anyone remembering to
mark a test; a test that reaches SeaweedFS, Azurite or Spark some other way fails until
the rule below covers it.
"""

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

# Marker -> the fixtures that start its server, and the parameter value that selects it
# (an engine or store parametrized by name, whose fixture is fetched inside the test).
HEAVY = {
    "s3": ({"seaweed"}, "s3"),
    "azure": ({"azurite"}, "azure"),
    "spark": ({"spark", "standalone_spark"}, "spark"),
}
SOAK_MODULES = ("test_soak.py", "test_chaos.py")


def _markers_for(item: pytest.Item, fixtures: set[str]) -> set[str]:
    callspec = getattr(item, "callspec", None)
    params = {v for v in callspec.params.values() if isinstance(v, str)} if callspec is not None else set()
    found = {marker for marker, (names, param) in HEAVY.items() if fixtures & names or param in params}
    if item.path.name in SOAK_MODULES:
        found.add("soak")
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with what it starts, so `-m "not s3"` and the like deselect it."""
    for item in items:
        for marker in sorted(_markers_for(item, set(getattr(item, "fixturenames", ())))):
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def _heavy_marker_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that used SeaweedFS or Spark without its marker (a fixture fetched by a name no rule knows)."""
    yield
    used = set(request.fixturenames)
    missing = [
        marker
        for marker, (names, _param) in HEAVY.items()
        if used & names and request.node.get_closest_marker(marker) is None
    ]
    if missing:
        pytest.fail(
            f"{request.node.nodeid} uses {missing} but is not marked: extend HEAVY in tests/conftest.py"
        )


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


@pytest.fixture(params=["local", "s3", "azure"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh, empty store root on local disk, in the SeaweedFS bucket or in the Azurite container."""
    if request.param == "local":
        return str(tmp_path / "store"), {}
    if request.param == "azure":
        azurite = request.getfixturevalue("azurite")
        return f"az://memwal-test/storage-{uuid.uuid4().hex}", azurite.storage_options()
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
def azurite() -> Iterator[Any]:
    """One real Azurite Blob server for the session, with container "memwal-test" created."""
    from tests.support.azurite import AzuriteServer

    server = AzuriteServer()
    try:
        server.create_container("memwal-test")
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
