"""memwal's own S3 client (obstore) against SeaweedFS behind fault proxies.

obstore's own retries are off: memwal's retry policy decides, request by
request, and a conditional put whose answer was lost is settled by reading
the object back, never by trusting a second put. Each proxy records every
request line, so these also pin how many requests went out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store
from tests.support.lost_response import LoseOneResponse
from tests.support.paths import PROJECT_ROOT
from tests.support.proxy import LatencyProxy
from tests.support.write_faults import Fault, ResponseFaults

# A lost answer costs one request time limit, not the default 15 s.
FAST = {"timeout": "1s", "connect_timeout": "1s", "client_retry_timeout": "10"}


def _port(seaweed: Any) -> int:
    return int(seaweed.endpoint.rsplit(":", 1)[1])


def _through(seaweed: Any, url: str) -> StorageOptions:
    return StorageOptions({**seaweed.storage_options(), **FAST, "aws_endpoint": url})


def test_a_conditional_put_whose_answer_was_lost_is_its_own_object(seaweed: Any) -> None:
    """The put landed, its answer never came: the retry meets the object, reads it back, finds its own bytes."""
    prefix = f"s3://memwal-test/lost-answer-{uuid.uuid4().hex}"
    with LoseOneResponse(_port(seaweed), method="PUT", path_part="/lease/") as proxy:
        store = open_store(prefix, _through(seaweed, proxy.url))
        store.put_if_not_exists("lease/1.json", b"mine")
    assert len(proxy.lost) == 1
    assert store.stats.snapshot() == {"put_if_not_exists": 2, "get": 1}
    direct = open_store(prefix, StorageOptions(seaweed.storage_options()))
    assert direct.read("lease/1.json") == b"mine"
    # A later writer still loses the race: the object is there, and not its bytes.
    with pytest.raises(AlreadyExistsError, match=r"lease/1\.json already exists"):
        direct.put_if_not_exists("lease/1.json", b"theirs")


def test_a_server_error_after_the_put_landed_is_settled_the_same_way(seaweed: Any) -> None:
    """A 500 to a put that was applied: exactly one retry (obstore adds none), which finds its own object."""
    prefix = f"s3://memwal-test/put-500-{uuid.uuid4().hex}"
    with ResponseFaults(_port(seaweed), [Fault("PUT", "/manifest/")]) as proxy:
        store = open_store(prefix, _through(seaweed, proxy.url))
        store.put_if_not_exists("manifest/1.binpb", b"version one")
        assert store.read("manifest/1.binpb") == b"version one"
    puts = [line for line in proxy.requests if line.startswith("PUT ")]
    assert len(puts) == 2 and len(proxy.failed) == 1, proxy.requests


def test_reads_retry_a_reset_and_give_up_in_bounded_time(seaweed: Any) -> None:
    """Every answer reset: a few attempts, then one memwal error naming the object, not the credentials."""
    prefix = f"s3://memwal-test/reset-{uuid.uuid4().hex}"
    direct = open_store(prefix, StorageOptions(seaweed.storage_options()))
    direct.write("a.bin", b"x")
    with ResponseFaults(_port(seaweed), [Fault("GET", "a.bin", every=1, answer="reset")]) as proxy:
        store = open_store(prefix, _through(seaweed, proxy.url))
        with pytest.raises(StorageError) as raised:
            store.read("a.bin")
    attempts = store.stats.snapshot()["get"]
    assert 1 < attempts <= 5 and len(proxy.failed) == attempts
    message = str(raised.value)
    assert "a.bin" in message and seaweed.secret_key not in message and seaweed.access_key not in message


def test_missing_objects_and_buckets_are_told_apart(seaweed: Any) -> None:
    store = open_store(
        f"s3://memwal-test/missing-{uuid.uuid4().hex}", StorageOptions(seaweed.storage_options())
    )
    assert store.head("nope") is None and not store.exists("nope")
    with pytest.raises(NotFoundError, match="nope does not exist"):
        store.read("nope")
    nobucket = open_store("s3://no-such-bucket/t", StorageOptions(seaweed.storage_options()))
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket' does not exist"):
        nobucket.list_files("x")


def test_wrong_keys_are_denied_without_showing_them(seaweed: Any) -> None:
    options = {**seaweed.storage_options(), "aws_secret_access_key": "wrong-secret-value"}
    store = open_store("s3://memwal-test/denied", StorageOptions(options))
    with pytest.raises(StorageError, match="denied") as raised:
        store.read("x")
    assert "wrong-secret-value" not in str(raised.value)


def test_first_files_is_one_request(seaweed: Any) -> None:
    """The first page of a listing (Lance's newest table manifest sorts first): one LIST, nested keys left out."""
    prefix = f"s3://memwal-test/first-{uuid.uuid4().hex}"
    store = open_store(prefix, StorageOptions(seaweed.storage_options()))
    store.map(lambda n: store.write(f"v/{n:04d}.manifest", b"m"), list(range(1200)))
    store.write("v/sub/inner", b"x")
    store.stats.reset()
    first = store.first_files("v")
    assert store.stats.snapshot() == {"list": 1}
    assert [info.path for info in first] == [f"v/{n:04d}.manifest" for n in range(1000)]


def test_a_listing_stops_at_the_page_that_reaches_before(seaweed: Any) -> None:
    """GC lists a region up to its WAL folder, which sorts last: the WAL's later pages are never asked for."""
    prefix = f"s3://memwal-test/before-{uuid.uuid4().hex}"
    with LatencyProxy(_port(seaweed)) as proxy:
        store = open_store(prefix, _through(seaweed, proxy.url))
        store.map(lambda n: store.write(f"r/manifest/{n}.binpb", b"m"), list(range(5)))
        store.map(lambda n: store.write(f"r/wal/{n:04d}.arrow", b"w"), list(range(2500)))
        proxy.reset()
        listed = store.list_files("r", recursive=True, before="r/wal/")
        assert [info.path for info in listed] == [f"r/manifest/{n}.binpb" for n in range(5)]
        assert proxy.counts == {"GET": 1}, proxy.lines


def test_credentials_from_a_profile_file(seaweed: Any, tmp_path: Path) -> None:
    """No keys in the options or the environment: botocore's chain finds them in a shared credentials file."""
    profile = tmp_path / "credentials"
    profile.write_text(
        f"[default]\naws_access_key_id = {seaweed.access_key}\naws_secret_access_key = {seaweed.secret_key}\n"
    )
    uri = f"s3://memwal-test/profile-{uuid.uuid4().hex}"
    setup = open_store(uri, StorageOptions(seaweed.storage_options()))
    setup.write("probe.txt", b"found")
    options = {k: v for k, v in seaweed.storage_options().items() if "key" not in k}
    code = (
        "import json, sys\n"
        "from memwal_core.storage.options import StorageOptions\n"
        "from memwal_core.storage.stores import open_store\n"
        "store = open_store(sys.argv[1], StorageOptions(json.loads(sys.argv[2])))\n"
        "print(store.read('probe.txt').decode())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(profile), AWS_CONFIG_FILE=str(tmp_path / "none"), HOME=str(tmp_path)
    )
    done = subprocess.run(
        [sys.executable, "-c", code, uri, json.dumps(options)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "found"


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")  # the fork is the point of the test
def test_a_child_forked_after_requests_fails_at_once(seaweed: Any) -> None:
    """obstore's runtime does not survive a fork: the child's first request fails in one line, not hangs."""
    store = open_store(f"s3://memwal-test/fork-{uuid.uuid4().hex}", StorageOptions(seaweed.storage_options()))
    store.write("a.bin", b"x")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(reader)
        try:
            store.read("a.bin")
            os.write(writer, b"read")
        except StorageError as exc:
            os.write(writer, str(exc).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    assert "forked after it made storage requests" in said, said
    assert store.read("a.bin") == b"x"  # the parent's runtime is untouched
