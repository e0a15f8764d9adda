"""Tables and sources on Azure Blob Storage: Azurite, started once for the session, stands in for Azure.

Azurite enforces conditional puts as Azure does (`If-None-Match: *` on an
existing blob: 409 BlobAlreadyExists), so memwal's fencing (leases, region
manifests, records) and Lance's (table manifests, WAL entries, claims) are
exercised for real. The rest of the Azure matrix runs beside the S3 tests it
mirrors: the object-store tests (`store_uri`), the stalled writer, GC through
the CLI, lost responses on the write path and Lance's lost WAL put.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from memwal_core.cli.main import main
from memwal_core.demo import write_demo_table
from memwal_core.errors import AlreadyExistsError, BadInputError, NotFoundError, StorageError
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import SparkEngine
from memwal_core.services.ingest.service import ingest
from memwal_core.services.merge.service import merge
from memwal_core.services.merge.staged import ROWS_PER_TASK_ENV
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store
from tests.support.cli import every_command, option_flags, run_cli
from tests.support.lost_response import LoseOneResponse
from tests.support.schema import lsm_rows, make_table, model_of, source_rows

# A lost answer costs one request time limit, not the default 15 s.
FAST = {"timeout": "1s", "connect_timeout": "1s", "client_retry_timeout": "10"}


def fresh(prefix: str) -> str:
    return f"az://memwal-test/{prefix}-{uuid.uuid4().hex}"


def test_a_lost_race_is_final_at_its_first_answer(azurite: Any) -> None:
    """Azure answers a conditional put on an existing blob 409, which S3 would retry: here it is final."""
    store = open_store(fresh("race"), StorageOptions(azurite.storage_options()))
    store.put_if_not_exists("lease/1.json", b"first")
    store.stats.reset()
    with pytest.raises(AlreadyExistsError, match=r"lease/1\.json already exists"):
        store.put_if_not_exists("lease/1.json", b"second")
    assert store.stats.snapshot() == {"put_if_not_exists": 1}
    assert store.read("lease/1.json") == b"first"


def test_a_conditional_put_whose_answer_was_lost_is_its_own_object(azurite: Any) -> None:
    """The put landed, its answer never came: the retry meets the blob (409), reads it back, finds its bytes."""
    uri = fresh("lost-answer")
    with LoseOneResponse(azurite.port, method="PUT", path_part="/lease/") as proxy:
        store = open_store(uri, StorageOptions({**proxy.storage_options(azurite.storage_options()), **FAST}))
        store.put_if_not_exists("lease/1.json", b"mine")
    assert len(proxy.lost) == 1
    assert store.stats.snapshot() == {"put_if_not_exists": 2, "get": 1}
    direct = open_store(uri, StorageOptions(azurite.storage_options()))
    with pytest.raises(AlreadyExistsError):
        direct.put_if_not_exists("lease/1.json", b"theirs")
    assert direct.read("lease/1.json") == b"mine"


def test_missing_blobs_and_containers_are_told_apart_and_wrong_keys_not_shown(azurite: Any) -> None:
    options = azurite.storage_options()
    store = open_store(fresh("missing"), StorageOptions(options))
    assert store.head("nope") is None and not store.exists("nope")
    with pytest.raises(NotFoundError, match="nope does not exist"):
        store.read("nope")
    with pytest.raises(NotFoundError, match="container 'no-such-container' does not exist"):
        open_store("az://no-such-container/t", StorageOptions(options)).list_files("x")
    wrong = "V3Jvbmcga2V5IG9mIHRoaXJ0eS10d28gYnl0ZXMhISE="  # base64, as an account key is
    denied = open_store(fresh("denied"), StorageOptions({**options, "azure_storage_account_key": wrong}))
    with pytest.raises(StorageError, match="denied") as raised:
        denied.read("x")
    assert wrong not in str(raised.value) and azurite.account_key not in str(raised.value)
    no_account = {k: v for k, v in options.items() if k != "azure_storage_account_name"}
    with pytest.raises(BadInputError, match="no storage account named"):
        open_store(fresh("no-account"), StorageOptions(no_account))


def test_deletes_of_missing_blobs_are_no_error_and_batches_delete_the_rest(azurite: Any) -> None:
    """Azure answers 404 to a missing blob, in a batch too, where its batch stops: the rest still go."""
    store = open_store(fresh("deletes"), StorageOptions(azurite.storage_options()))
    store.delete("never-written")
    names = [f"d/{i:04d}" for i in range(300)]
    store.map(lambda name: store.write(name, b"x"), names)
    store.stats.reset()
    store.delete_many(["d/missing", *names])
    # Two batches of at most 256; the one that met the missing blob again one DELETE per key.
    assert store.stats.snapshot() == {"delete_many": 2, "delete": 256}
    assert store.list_files("d", recursive=True) == []


def test_abfss_uri_names_the_same_blobs(azurite: Any) -> None:
    """`abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX` is the container and prefix `az://` names."""
    prefix = f"abfss-{uuid.uuid4().hex}"
    options = StorageOptions(azurite.storage_options())
    open_store(f"az://memwal-test/{prefix}", options).write("a.bin", b"same")
    abfss = open_store(f"abfss://memwal-test@{azurite.account}.dfs.core.windows.net/{prefix}", options)
    assert abfss.read("a.bin") == b"same"


def test_every_command_on_azure_through_the_cli_keeps_secrets_out(
    azurite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Status, merge (both commit forms' engine: local), GC and every other command on an `az://` table."""
    uri = fresh("tables")
    options = azurite.storage_options()
    log = write_demo_table(uri, options, base_rows=300, regions=2, rounds=3, rows_per_generation=30)
    source = tmp_path / "more.csv"
    pcsv.write_csv(source_rows(10, offset=5000), source)
    flags = option_flags(options)
    with MemWalTable.open(uri, options) as table:
        before = status(table)
    assert before.pending_total > 0
    for command, extra in every_command(str(source)).items():
        if command in ("init", "demo", "ingest"):
            continue
        assert main([command, uri, *extra, "--json", *flags]) == 0, command
        json.loads(capsys.readouterr().out)
    with MemWalTable.open(uri, options) as table:
        assert status(table).pending_total == 0
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
    assert rows == log.model()
    # The account key from the environment, as for S3: neither shown nor needed as an option.
    keyless = {k: v for k, v in options.items() if k != "azure_storage_account_key"}
    done = run_cli(
        "status",
        uri,
        "--json",
        *option_flags(keyless),
        env={"AZURE_STORAGE_ACCOUNT_KEY": azurite.account_key},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pending_generations_total"] == 0
    # Azurite by `azure_storage_use_emulator` alone (its well-known account), at the URL its variable names.
    emulated = run_cli(
        "status", uri, "-o", "azure_storage_use_emulator=true", env={"AZURITE_BLOB_STORAGE_URL": azurite.url}
    )
    assert emulated.returncode == 0, emulated.stderr
    missing = run_cli("status", uri + "-missing", *flags)
    assert missing.returncode == 2
    for output in (done.stdout, done.stderr, missing.stdout, missing.stderr):
        assert azurite.account_key not in output


def test_spark_merge_on_azure(azurite: Any, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executors read generations from Azure and stage their output there; the staging is cleaned up."""
    monkeypatch.setenv(ROWS_PER_TASK_ENV, "16")
    uri = fresh("spark")
    options = azurite.storage_options()
    log = write_demo_table(uri, options, base_rows=300, regions=2, rounds=2, rows_per_generation=30)
    with MemWalTable.open(uri, options) as table:
        result = merge(table, engine=SparkEngine(spark))
        assert not result.failures and result.generations_merged > 0
        assert status(table).pending_total == 0
        rows = {r["id"]: (r["name"], r["score"]) for r in table.dataset().to_table().to_pylist()}
        assert not table.store.list_files(STAGING_DIR, recursive=True)
    assert rows == log.model()


def test_azure_sources_by_folder_glob_and_name(tmp_path: Path, azurite: Any) -> None:
    """Azure sources are listed and downloaded by memwal's own client, into an Azure table."""
    options = azurite.storage_options()
    root = fresh("ingest")
    uri = make_table(f"{root}/t", storage_options=options)
    first, second = source_rows(3000), source_rows(2000, offset=2500, tag="u")
    pq.write_table(first.slice(0, 1500), tmp_path / "a.parquet")
    pq.write_table(first.slice(1500), tmp_path / "b.parquet")
    pcsv.write_csv(second.slice(0, 1000), tmp_path / "c.csv")
    (tmp_path / "d.json").write_text("".join(json.dumps(r) + "\n" for r in second.slice(1000).to_pylist()))
    sources = open_store(f"{root}/src", StorageOptions(options))
    for name, key in (("a.parquet", "parts/a.parquet"), ("b.parquet", "parts/b.parquet")):
        sources.write(key, (tmp_path / name).read_bytes())
    sources.write("parts/_SUCCESS", b"")
    sources.write("c.csv", (tmp_path / "c.csv").read_bytes())
    sources.write("d.json", (tmp_path / "d.json").read_bytes())
    with MemWalTable.open(uri, options) as table:
        for source in ("parts", "*.csv", "d.json"):
            result = ingest(table, [f"{root}/src/{source}"])
            assert result.rows_written == result.rows_read > 0, source
        with pytest.raises(NotFoundError, match="does not exist"):
            ingest(table, [f"{root}/src/nothing-*.csv"])
    assert lsm_rows(uri, options) == model_of(first, second)


def test_spark_ingest_from_azure_sources(azurite: Any, spark: Any, tmp_path: Path) -> None:
    """Executors download Azure sources themselves, write their regions, and stage on Azure."""
    options = azurite.storage_options()
    root = fresh("spark-ingest")
    uri = make_table(f"{root}/t", storage_options=options)
    parts = [source_rows(2000, offset=i * 1500, tag=f"p{i}-") for i in range(3)]  # overlaps: duplicates
    sources = open_store(f"{root}/src", StorageOptions(options))
    for i, part in enumerate(parts):
        pq.write_table(part, tmp_path / f"{i}.parquet")
        sources.write(f"part-{i}.parquet", (tmp_path / f"{i}.parquet").read_bytes())
    with MemWalTable.open(uri, options) as table:
        result = ingest(table, [f"{root}/src"], engine=SparkEngine(spark))
        assert result.engine == "spark" and result.rows_read == 6000
        assert not table.store.list_files(STAGING_DIR, recursive=True)
    assert lsm_rows(uri, options) == model_of(*parts)
