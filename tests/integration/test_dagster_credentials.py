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
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster_shared.serdes import serialize_value

from memwal_core.errors import BadInputError
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig, load_tables
from tests.support.dagster import DG, new_project
from tests.support.paths import PROJECT_ROOT
from tests.support.schema import make_table
from tests.support.secrets import SECRET as PASTED
from tests.support.secrets import shown

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


OPTIONS = json.dumps({"aws_access_key_id": "AKIAEXAMPLE48", "aws_secret_access_key": PASTED})
# Issue 48: a credential in each place a table's YAML can hold one, as (its attributes beside name and uri,
# the environment, what the refusal says). Each fails the load, and no part of the credential is printed.
IN_YAML: dict[str, tuple[dict[str, Any], dict[str, str], str]] = {
    "the uri": ({"uri": f"s3://AKIAEXAMPLE48:{PASTED}@bucket/t"}, {}, "holds credentials"),
    "the uri, from a variable": (
        {"uri": "{{ env('EVENTS_URI') }}"},
        {"EVENTS_URI": f"s3://AKIAEXAMPLE48:{PASTED}@bucket/t"},
        "holds credentials",
    ),
    "storage_options": ({"storage_options": json.loads(OPTIONS)}, {}, "storage options (credentials"),
    "storage_options, each from a variable": (
        {"storage_options": {"aws_secret_access_key": "{{ env('AWS_SECRET') }}"}},
        {"AWS_SECRET": PASTED},
        "storage options (credentials",
    ),
    "storage_options, from one variable": (
        {"storage_options": "{{ env('EVENTS_OPTIONS') }}"},
        {"EVENTS_OPTIONS": OPTIONS},
        "storage options (credentials",
    ),
    "storage_options_env, given the options": (
        {"storage_options_env": json.loads(OPTIONS)},
        {},
        "is not an environment variable name",
    ),
    "storage_options_env, given the variable's value": (
        {"storage_options_env": "{{ env('EVENTS_OPTIONS') }}"},
        {"EVENTS_OPTIONS": OPTIONS},
        "is not an environment variable name",
    ),
    "spark_remote_env, given the URL": (
        {"merge_engine": "spark", "spark_remote_env": "{{ env('EVENTS_SPARK_REMOTE') }}"},
        {"EVENTS_SPARK_REMOTE": f"sc://10.0.0.5:15002/;token={PASTED}"},
        "is not an environment variable name",
    ),
}


@pytest.mark.parametrize(("attributes", "env", "refusal"), IN_YAML.values(), ids=IN_YAML.keys())
def test_dg_check_defs_refuses_a_credential_in_the_yaml_without_printing_it(
    tmp_path: Path, attributes: dict[str, Any], env: dict[str, str], refusal: str
) -> None:
    root, environment = new_project(tmp_path)
    (root / "shop" / "defs" / "events").mkdir()
    component = {
        "type": "memwal_pipelines.MemWalTableComponent",
        "attributes": {"name": "events", "uri": "s3://bucket/events", **attributes},
    }
    (root / "shop" / "defs" / "events" / "defs.yaml").write_text(yaml.safe_dump(component))
    done = subprocess.run(
        [str(DG), "check", "defs"],
        cwd=root,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout + done.stderr
    assert done.returncode != 0 and refusal in printed, printed
    assert not shown(printed), shown(printed)


@pytest.mark.parametrize(("attributes", "env", "refusal"), IN_YAML.values(), ids=IN_YAML.keys())
def test_the_table_list_refuses_a_credential_without_printing_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    attributes: dict[str, Any],
    env: dict[str, str],
    refusal: str,
) -> None:
    """The list takes no templates: a value given literally (the variable's, where the YAML named one)."""
    literal = {
        key: env[value.split("'")[1]] if isinstance(value, str) and "env(" in value else value
        for key, value in attributes.items()
    }
    listing = tmp_path / "tables.yaml"
    listing.write_text(
        yaml.safe_dump({"tables": [{"name": "events", "uri": "s3://bucket/events", **literal}]})
    )
    with pytest.raises(BadInputError) as refused:
        load_tables(str(listing))
    assert refusal in str(refused.value) and not shown(str(refused.value)), str(refused.value)


@pytest.mark.parametrize(
    "options",
    [
        json.dumps({"timeout": PASTED}),
        json.dumps({"max_concurrent_requests": PASTED}),
        json.dumps({f"aws_secret_access_key {PASTED}": "x"}),
        json.dumps([PASTED]),
        PASTED,
    ],
    ids=["under timeout", "under max_concurrent_requests", "in the key", "a list", "not JSON"],
)
def test_a_run_refuses_bad_storage_options_without_printing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: str
) -> None:
    """The variable `storage_options_env` names is read by the run: Dagster's record of its failure (the
    error text every view shows) holds no part of the credential."""
    monkeypatch.setenv("EVENTS_OPTIONS", options)
    table = TableConfig(name="events", uri=make_table(tmp_path / "t"), storage_options_env="EVENTS_OPTIONS")
    result = (
        build_definitions([table])
        .resolve_job_def("events_snapshot")
        .execute_in_process(instance=DagsterInstance.ephemeral(), raise_on_error=False)
    )
    assert not result.success
    recorded = serialize_value(result.all_events)
    assert "EVENTS_OPTIONS" in recorded or "storage option" in recorded, recorded[-3000:]
    assert not shown(recorded), shown(recorded)
