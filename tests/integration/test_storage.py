"""The object store on local disk and on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.retry import RetryPolicy
from memwal_core.storage.stores import open_store


def _race(uri: str, options: dict[str, str], path: str, payload: bytes) -> bool:
    store = open_store(uri, StorageOptions(options))
    try:
        store.put_if_not_exists(path, payload)
        return True
    except AlreadyExistsError:
        return False


def test_basic_operations(store_uri: tuple[str, dict[str, str]]) -> None:
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    assert not store.exists("a/b.bin")
    with pytest.raises(NotFoundError, match=r"b\.bin"):
        store.read("a/b.bin")
    store.write("a/b.bin", b"one")
    store.write("a/b.bin", b"two")
    assert store.read("a/b.bin") == b"two"
    info = store.head("a/b.bin")
    assert info is not None and info.size == 3 and info.mtime > time.time() - 600
    store.write("a/c/d.bin", b"x")
    store.write("a/e/f.bin", b"y")
    assert store.list_dirs("a") == ["c", "e"]
    assert [i.path for i in store.list_files("a")] == ["a/b.bin"]
    assert [i.path for i in store.list_files("a", recursive=True)] == [
        "a/b.bin",
        "a/c/d.bin",
        "a/e/f.bin",
    ]
    assert store.is_dir("a/c") and not store.is_dir("zzz")
    assert store.exists_many(["a/b.bin", "nope", "a/c/d.bin"]) == [True, False, True]
    store.delete("a/b.bin")
    store.delete("a/b.bin")
    assert not store.exists("a/b.bin")
    assert store.list_dirs("missing") == []


def test_put_if_not_exists_thread_race(store_uri: tuple[str, dict[str, str]]) -> None:
    uri, options = store_uri
    store: ObjectStore = open_store(uri, StorageOptions(options))
    for round_ in range(5):
        path = f"manifest/{round_}.binpb"
        payloads = [f"writer-{i}-{uuid.uuid4()}".encode() for i in range(16)]

        def attempt(payload: bytes, path: str = path) -> bool:
            try:
                store.put_if_not_exists(path, payload)
                return True
            except AlreadyExistsError:
                return False

        with ThreadPoolExecutor(16) as pool:
            wins = list(pool.map(attempt, payloads))
        assert wins.count(True) == 1
        assert store.read(path) == payloads[wins.index(True)]
    with pytest.raises(AlreadyExistsError, match=r"0\.binpb"):
        store.put_if_not_exists("manifest/0.binpb", b"late")


def test_put_if_not_exists_process_race(store_uri: tuple[str, dict[str, str]]) -> None:
    uri, options = store_uri
    path = "manifest/contended.binpb"
    payloads = [f"process-{i}".encode() for i in range(8)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        wins = pool.starmap(_race, [(uri, options, path, p) for p in payloads])
    assert wins.count(True) == 1
    store = open_store(uri, StorageOptions(options))
    assert store.read(path) == payloads[wins.index(True)]


def test_unreachable_s3_fails_fast_with_bounded_retries() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = StorageOptions(
        {
            "aws_endpoint": f"http://127.0.0.1:{port}",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "very-secret-value",
            "allow_http": "true",
            "aws_region": "us-east-1",
        }
    )
    store = open_store("s3://bucket/t", options)
    assert hasattr(store, "retry")
    store.retry = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)  # type: ignore[attr-defined]
    started = time.monotonic()
    with pytest.raises(StorageError) as err:
        store.read("x")
    assert time.monotonic() - started < 20
    assert store.stats.snapshot()["get"] == 3
    assert "very-secret-value" not in str(err.value) and "AKIDEXAMPLE" not in str(err.value)
    assert f"127.0.0.1:{port}" in str(err.value)


def test_retry_policy_retries_only_transient_errors() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("transient")
        return "ok"

    policy = RetryPolicy(attempts=5, base_delay=0.001, max_delay=0.002)
    assert policy.run(flaky, lambda e: isinstance(e, ConnectionError)) == "ok"
    assert len(calls) == 3

    def exists() -> Any:
        calls.append(1)
        raise AlreadyExistsError("x")

    calls.clear()
    with pytest.raises(AlreadyExistsError):
        policy.run(exists, lambda e: isinstance(e, ConnectionError))
    assert len(calls) == 1


def test_storage_options_never_show_secrets() -> None:
    options = StorageOptions.parse(
        [
            "aws_access_key_id=AKID",
            "aws_secret_access_key=s3cr3t",
            "aws_region=eu",
            "sse_customer_key_base64=c0ffee",
        ]
    )
    shown = repr(options) + str(options.redacted())
    assert "s3cr3t" not in shown and "AKID" not in shown and "c0ffee" not in shown and "eu" in shown
    with pytest.raises(Exception, match="KEY=VALUE"):
        StorageOptions.parse(["novalue"])


def test_listing_and_deleting_past_one_page(store_uri: tuple[str, dict[str, str]]) -> None:
    """S3 lists 1,000 keys a page and deletes 1,000 a request: more than that takes every page and batch."""
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    names = [f"many/{i:05d}.bin" for i in range(1234)]
    store.map(lambda name: store.write(name, b"x"), names)
    store.write("many/sub/inner.bin", b"y")
    assert [info.path for info in store.list_files("many")] == names
    assert len(store.list_files("many", recursive=True)) == len(names) + 1
    assert store.list_dirs("many") == ["sub"]
    deleted = store.delete_tree("many")
    assert len(deleted) == len(names) + 1
    assert store.list_files("many", recursive=True) == [] and not store.is_dir("many")
