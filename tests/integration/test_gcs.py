"""Google Cloud Storage: what can be tested without GCS.

No emulator available here serves the XML API that object_store's GCS client
(Lance's and memwal's) speaks: fake-gcs-server takes no plain PUT there
(only uploads with an uploadType or a signed URL) and ignores
`x-goog-if-generation-match` (fsouza/fake-gcs-server #994), and
gcp-storage-emulator has no XML HEAD, LIST or DELETE. So fencing on GCS is
untested (docs/operations.md says so). Tested here, against a loopback
listener that answers each request with GCS's documented answer: the
options, the conditional put's header, a lost race read as final, and an
unreachable endpoint failing within memwal's time limits.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import unquote

import pytest

from memwal_core.errors import AlreadyExistsError, BadInputError, StorageError
from memwal_core.storage.gcs import GcsStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store
from tests.support.service import InProcessListener, free_ports

_PRECONDITION_FAILED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
    b"<Message>At least one of the pre-conditions you specified did not hold.</Message></Error>"
)


class PreconditionFailed(InProcessListener):
    """Answers every request 412, as GCS answers a put with `x-goog-if-generation-match: 0` on an existing
    object; keeps each request's head."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        super().__init__("gcs-412")

    def serve(self, connection: socket.socket) -> None:
        self.hold(connection)
        threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            data = b""
            while b"\r\n\r\n" not in data and (chunk := connection.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            left = (int(length.group(1)) if length else 0) - len(body)
            while left > 0 and (chunk := connection.recv(left)):
                left -= len(chunk)
            self.heads.append(head)
            connection.sendall(
                b"HTTP/1.1 412 Precondition Failed\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(_PRECONDITION_FAILED)}\r\nConnection: close\r\n\r\n".encode()
                + _PRECONDITION_FAILED
            )


def gcs_options(base_url: str) -> dict[str, str]:
    """A service account key that points object_store at `base_url` without OAuth (as for an emulator)."""
    key = {"gcs_base_url": base_url, "disable_oauth": True, "client_email": "", "private_key": ""}
    return {"google_service_account_key": json.dumps({**key, "private_key_id": ""}), "allow_http": "true"}


@pytest.fixture
def listener() -> Iterator[PreconditionFailed]:
    with PreconditionFailed() as found:
        yield found


def test_a_conditional_put_asks_for_generation_zero_and_a_412_is_a_lost_race(
    listener: PreconditionFailed,
) -> None:
    store = open_store("gs://bucket/tables/t", StorageOptions(gcs_options(listener.url)))
    assert isinstance(store, GcsStore) and store.uri == "gs://bucket/tables/t"
    with pytest.raises(AlreadyExistsError, match=r"gs://bucket/tables/t/lease/1\.json already exists"):
        store.put_if_not_exists("lease/1.json", b"mine")
    assert store.stats.snapshot() == {"put_if_not_exists": 1}  # final: never retried
    (head,) = listener.heads
    method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
    assert (method, unquote(path)) == ("PUT", "/bucket/tables/t/lease/1.json"), head[:80]
    assert re.search(rb"(?im)^x-goog-if-generation-match:\s*0\r?$", head), head


def test_the_service_account_key_from_the_environment(
    listener: PreconditionFailed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Lance reads them: GOOGLE_* variables when the options leave a setting out."""
    options = gcs_options(listener.url)
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", options.pop("google_service_account_key"))
    store = open_store("gs://bucket/t", StorageOptions(options))
    with pytest.raises(AlreadyExistsError):
        store.put_if_not_exists("x", b"x")
    assert len(listener.heads) == 1


def test_an_unreachable_endpoint_fails_within_the_limits_without_showing_the_key() -> None:
    (port,) = free_ports(1)
    options = {**gcs_options(f"http://127.0.0.1:{port}"), "timeout": "1s", "client_retry_timeout": "3"}
    store = open_store("gs://bucket/t", StorageOptions(options))
    started = time.monotonic()
    with pytest.raises(StorageError, match="cannot reach GCS for gs://bucket/t/x") as raised:
        store.read("x")
    assert time.monotonic() - started < 10
    assert "gcs_base_url" not in str(raised.value)


def test_gcs_and_azure_options_are_known_checked_and_secret() -> None:
    checked = StorageOptions.checked(
        {
            "google_service_account": "/etc/sa.json",
            "google_service_account_key": "{}",
            "azure_storage_account_name": "acct",
            "azure_storage_account_key": "S3CRETKEY",
            "azure_storage_use_emulator": "true",
            "azure_storage_sas_token": "sv=1&sig=S3CRETSIG",
        }
    )
    shown = repr(checked)
    assert "S3CRETKEY" not in shown and "S3CRETSIG" not in shown and "acct" in shown
    assert "'google_service_account_key': '***'" in shown
    with pytest.raises(BadInputError, match="did you mean 'azure_storage_account_key'"):
        StorageOptions.checked({"azure_storage_acount_key": "S3CRETKEY"})
    with pytest.raises(BadInputError, match="did you mean 'google_service_account'"):
        StorageOptions.checked({"google_service_acount": "/etc/sa.json"})
