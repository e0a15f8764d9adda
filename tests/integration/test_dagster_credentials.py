"""No credential reaches what the Dagster webserver shows (issue 28, item 2).

A table URI with user info (`s3://KEY:SECRET@bucket/t`) used to load, and the
secret then appeared in the repository snapshot the webserver serves (the
`memwal` resource's config, the ingest job's description). Now the table list
refuses it when the code location loads, and the load error does not echo it;
credentials given the supported way (storage options in an environment
variable) stay out of the snapshot too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster_shared.serdes import serialize_value

from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import load_tables
from tests.support.paths import PROJECT_ROOT

KEY = "AKIAHOSTILE28EXAMPLE"
SECRET = "hostile28/SeCrEt+VaLuE"


def snapshot_text(listing: Path) -> str:
    """The repository snapshot of the code location for `listing`, serialized as the webserver gets it."""
    definitions = build_definitions(load_tables(str(listing)))
    return serialize_value(RepositorySnap.from_def(definitions.get_repository_def()))


@pytest.mark.parametrize(
    "uri",
    [f"s3://{KEY}:{SECRET}@bucket/t", f"s3://{KEY}@bucket/t", f"file://{KEY}:{SECRET}@localhost/data/t"],
)
def test_a_table_uri_with_credentials_fails_the_load_without_echoing_them(tmp_path: Path, uri: str) -> None:
    listing = tmp_path / "tables.yaml"
    listing.write_text(f"tables:\n  - {{name: events, uri: '{uri}'}}\n")
    code = "import memwal_pipelines.definitions"
    env = {**os.environ, "MEMWAL_TABLES": str(listing)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=300
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "holds credentials" in last and ("://***@bucket/t" in last or "://***@localhost/data/t" in last), (
        last
    )
    assert KEY not in done.stderr + done.stdout and "SeCrEt" not in done.stderr + done.stdout


def test_credentials_in_storage_options_stay_out_of_the_repository_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "EVENTS_OPTIONS", json.dumps({"aws_access_key_id": KEY, "aws_secret_access_key": SECRET})
    )
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        "tables:\n  - {name: events, uri: 's3://bucket/t', storage_options_env: EVENTS_OPTIONS,"
        " merge_engine: spark, spark_master: 'spark://10.0.0.5:7077'}\n"
    )
    text = snapshot_text(listing)
    assert "s3://bucket/t" in text and "EVENTS_OPTIONS" in text, "the snapshot is the one the list describes"
    assert KEY not in text and "SeCrEt" not in text


def test_a_spark_master_with_credentials_is_refused(tmp_path: Path) -> None:
    from memwal_core.errors import BadInputError

    listing = tmp_path / "tables.yaml"
    listing.write_text(
        f"tables:\n  - {{name: e, uri: /t, spark_master: 'spark://{KEY}:{SECRET}@host:7077'}}\n"
    )
    with pytest.raises(
        BadInputError, match=r"spark_master: the URI spark://\*\*\*@host:7077 holds credentials"
    ) as refused:
        load_tables(str(listing))
    assert KEY not in str(refused.value)


TOKEN = "hostile33SparkToken"


def test_a_spark_connect_token_never_reaches_the_repository_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the table list a token is refused (named, not echoed); through variables it stays out of the
    snapshot: the pipeline's MEMWAL_SPARK_REMOTE and a table's spark_remote_env go in by name only."""
    from memwal_core.errors import BadInputError

    with_token = f"sc://10.0.0.5:15002/;token={TOKEN};use_ssl=true"
    listing = tmp_path / "tables.yaml"
    listing.write_text(f"tables:\n  - {{name: e, uri: /t, spark_remote: '{with_token}'}}\n")
    with pytest.raises(BadInputError) as refused:
        load_tables(str(listing))
    assert "spark_remote_env" in str(refused.value) and TOKEN not in str(refused.value)

    monkeypatch.setenv("MEMWAL_SPARK_REMOTE", with_token)
    monkeypatch.setenv("EVENTS_SPARK_REMOTE", with_token.replace("10.0.0.5", "10.0.0.6"))
    listing.write_text(
        "tables:\n  - {name: events, uri: /t, merge_engine: spark, spark_remote_env: EVENTS_SPARK_REMOTE}\n"
        "  - {name: other, uri: /u, merge_engine: spark}\n"
    )
    text = snapshot_text(listing)
    assert "EVENTS_SPARK_REMOTE" in text, "the snapshot is this list's"
    assert TOKEN not in text
