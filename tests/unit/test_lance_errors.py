"""Each Lance error text memwal acts on, provoked from real Lance (pylance 14) and classified.

A Lance upgrade that rewords one of these texts fails the test named after it.
The lost response of a WAL write needs an object store that loses it: see
tests/integration/test_lance_errors_s3.py.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import CompactedSsTable

from memwal_core import lance_errors
from memwal_core.errors import DeleteConflictError, FencedError, StaleMergeError, StorageError
from memwal_core.format.naming import table_manifest_name
from memwal_core.lance_errors import OpenFailure, WriteFailure
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.commit import commit_region, delete_fenced
from memwal_core.services.writer import MemWalWriter, _native_error
from tests.support.model import KEYED_SCHEMA, ModelTable
from tests.support.service import free_ports
from tests.support.silent import SilentEndpoint


def raised(action: Callable[[], object]) -> Exception:
    """The exception `action()` raises."""
    with pytest.raises(Exception) as info:
        action()
    return info.value


@pytest.fixture
def table(tmp_path: Path) -> ModelTable:
    return ModelTable(tmp_path / "t", KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(10)])


def keys(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def rows(*ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": "new"} for i in ids], schema=KEYED_SCHEMA)


def test_stale_merge(table: ModelTable) -> None:
    """A marker at or below recorded progress: another merger merged the region first."""
    region = table.write(None, [("put", [{"id": 100, "v": "g1"}])])
    commit_region(table.dataset(), ["id"], region, 1, rows(), keys(), use_index=False)
    stale = raised(
        lambda: (
            table.dataset()
            .merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .mark_sstables_as_compacted([CompactedSsTable(region, 1)])
            .execute(rows())
        )
    )
    assert lance_errors.is_stale_merge(stale), stale
    with pytest.raises(StaleMergeError):
        commit_region(table.dataset(), ["id"], region, 1, rows(), keys(), use_index=False)


def test_retries_exhausted(table: ModelTable) -> None:
    """A delete built on a version another commit moved past, with Lance's retries off."""
    old = table.dataset()
    table.dataset().delete("id = 5")
    conflict = raised(
        lambda: old.merge_insert("id").when_matched_delete().conflict_retries(0).execute(keys(5))
    )
    assert lance_errors.is_retries_exhausted(conflict) and lance_errors.is_commit_conflict(conflict), conflict
    old = table.dataset()
    table.dataset().delete("id = 6")
    with pytest.raises(DeleteConflictError):
        delete_fenced(old, ["id"], keys(6), use_index=False)


def test_incompatible_transaction(table: ModelTable) -> None:
    """A delete built on a version a newer overwrite replaced: no rebase is possible."""
    old = table.dataset()
    lance.write_dataset(rows(1), table.uri, mode="overwrite")
    conflict = raised(
        lambda: old.merge_insert("id").when_matched_delete().conflict_retries(0).execute(keys(1))
    )
    assert lance_errors.is_commit_conflict(conflict), conflict
    assert not lance_errors.is_retries_exhausted(conflict)


def test_writer_fenced(table: ModelTable) -> None:
    """A writer whose region a second writer claimed."""
    region = str(uuid.uuid4())
    first = table.dataset().mem_wal_writer(region)  # a durable put waits for its WAL write
    first.put(rows(1))
    second = table.dataset().mem_wal_writer(region)
    try:
        fenced = raised(lambda: first.put(rows(2)))
    finally:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            first.close()
        second.close()
    assert lance_errors.write_failure(fenced) is WriteFailure.FENCED, fenced
    assert isinstance(_native_error(region, fenced), FencedError)


def test_overfull_replay(tmp_path: Path, table: ModelTable) -> None:
    """A claim whose replay of the region's WAL overflows its MemTable limits; memwal replays it once."""
    region = str(uuid.uuid4())
    first = table.dataset().mem_wal_writer(region)  # Lance's default limits
    first.put(rows(*range(100, 140)))
    first.put(rows(*range(140, 180)))  # a second WAL entry of the same generation: 80 rows in all
    try:
        overfull = raised(lambda: table.dataset().mem_wal_writer(region, max_memtable_rows=50))
    finally:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            first.close()
    assert lance_errors.is_overfull_replay(overfull), overfull
    assert lance_errors.write_failure(overfull) is WriteFailure.STORAGE
    with MemWalWriter(table.uri, region=region, max_memtable_rows=50) as writer:
        assert writer.claim() == region


def test_invalid_user_input(table: ModelTable) -> None:
    """Rows whose types differ from the table's, past memwal's own checks, reach Lance's writer."""
    wrong = pa.table({"id": pa.array([1], pa.int32()), "v": ["x"]})
    with table.dataset().mem_wal_writer(str(uuid.uuid4()), durable_write=False) as writer:
        invalid = raised(lambda: writer.put(wrong))
    assert lance_errors.write_failure(invalid) is WriteFailure.INVALID_INPUT, invalid


def test_not_found(tmp_path: Path, table: ModelTable) -> None:
    """No dataset at the path, and no such version of one."""
    missing = raised(lambda: lance.dataset(str(tmp_path / "nothing")))
    assert lance_errors.open_failure(missing) is OpenFailure.NOT_FOUND, missing
    no_version = raised(lambda: lance.dataset(table.uri, version=999))
    assert lance_errors.open_failure(no_version) is OpenFailure.NOT_FOUND, no_version


def test_named_manifest(table: ModelTable) -> None:
    """A damaged manifest found while listing versions is named in Lance's error."""
    version = table.dataset().version
    manifest = Path(table.uri) / "_versions" / table_manifest_name(version)
    manifest.write_bytes(manifest.read_bytes()[:20])
    corrupt = raised(lambda: lance.dataset(table.uri, version=1).versions())
    assert lance_errors.open_failure(corrupt) is OpenFailure.UNREADABLE, corrupt
    assert lance_errors.named_manifest(corrupt) == f"_versions/{table_manifest_name(version)}"


def s3_options(endpoint: str, **extra: str) -> dict[str, str]:
    """Storage options for a table behind `endpoint`, with short time limits and no retries by default."""
    return {
        "aws_endpoint": endpoint,
        "allow_http": "true",
        "aws_access_key_id": "key",
        "aws_secret_access_key": "secret",
        "aws_region": "us-east-1",
        "aws_virtual_hosted_style_request": "false",
        "client_max_retries": "0",
        "client_retry_timeout": "1",
        "connect_timeout": "1s",
        "timeout": "500ms",
        **extra,
    }


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_ports(1)[0]


@pytest.fixture
def silent() -> Iterator[SilentEndpoint]:
    with SilentEndpoint() as endpoint:
        yield endpoint


def test_unreachable_endpoint(closed_port: int) -> None:
    """An endpoint that refuses connections; memwal says it cannot reach the table's storage."""
    options = s3_options(f"http://127.0.0.1:{closed_port}")
    refused = raised(lambda: lance.dataset("s3://bucket/table", version=1, storage_options=options))
    assert lance_errors.open_failure(refused) is OpenFailure.UNREACHABLE, refused
    with pytest.raises(StorageError, match="cannot reach the storage of table s3://bucket/table"):
        MemWalTable("s3://bucket/table", options).dataset(version=1)


def test_silent_endpoint_reads_as_unreachable(silent: SilentEndpoint) -> None:
    """Lance 14 reports a request that timed out as 'error sending request', not with NO_ANSWER's words."""
    options = s3_options(silent.url)
    quiet = raised(lambda: lance.dataset("s3://bucket/table", version=1, storage_options=options))
    assert lance_errors.open_failure(quiet) is OpenFailure.UNREACHABLE, quiet


def test_a_storage_error_after_retries_is_not_a_commit_conflict(closed_port: int) -> None:
    """Lance's storage errors mention their retries; only its commit texts mean a conflict."""
    options = s3_options(f"http://127.0.0.1:{closed_port}", client_max_retries="1", timeout="200ms")
    retried = raised(lambda: lance.dataset("s3://bucket/table", version=1, storage_options=options))
    assert "retries" in str(retried), retried
    assert not lance_errors.is_commit_conflict(retried) and not lance_errors.is_retries_exhausted(retried)
