"""A real Azurite (Microsoft's Azure Storage emulator) Blob service on loopback, for tests and benchmarks.

Azurite is the npm package `azurite`, which `.ci/run` installs into
`.venv/node`. It enforces conditional puts (`If-None-Match: *`, answered 409
BlobAlreadyExists, where Azure itself answers 409 too) and batch deletes, so
memwal's fencing and Lance's are exercised as on Azure. It keeps blobs in
memory, listens on a free 127.0.0.1 port, sends no telemetry, and is stopped
by its process group like SeaweedFS (and by the watchdog, should the tests die first).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path
from typing import IO

from tests.support.service import (
    LOOPBACK,
    EarlyExit,
    LoopbackService,
    free_ports,
    log_tail,
    start_server,
    stop_process_group,
)

# Azurite's well-known development account (public, in Microsoft's documentation).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_API_VERSION = "2021-08-06"
# Memory Azurite may keep blobs in (its default is half the machine's).
_MEMORY_MB = 2048


def azurite_binary() -> str:
    """Path of `azurite-blob`: in the virtualenv's `node` folder first (where `.ci/run` installs it), then PATH."""
    beside = Path(sys.executable).parent.parent / "node" / "node_modules" / ".bin" / "azurite-blob"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("azurite-blob")
    if found is None:
        raise FileNotFoundError(
            "azurite-blob not found; install it as .ci/run does (npm install --prefix .venv/node azurite@VERSION)"
        )
    return found


class AzuriteServer(LoopbackService):
    """One `azurite-blob` process on a free loopback port, blobs in memory."""

    account = ACCOUNT
    account_key = ACCOUNT_KEY
    scheme = "az"  # a table's URI scheme on this server

    def __init__(self, *, start: bool = True, start_timeout: float = 60.0) -> None:
        super().__init__(prefix="memwal-azurite-", start_timeout=start_timeout, base_dir=None)
        self.log_path = self.root / "azurite.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        if start:
            self.start()

    @property
    def url(self) -> str:
        """The server's base URL (what `AZURITE_BLOB_STORAGE_URL` names)."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def endpoint(self) -> str:
        """The account's Blob endpoint (path-style: the account is the URL's first segment)."""
        return f"{self.url}/{self.account}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def __repr__(self) -> str:
        return f"AzuriteServer(endpoint={self.endpoint if self.port else None!r}, pid={self.pid})"

    def storage_options(self) -> dict[str, str]:
        """Lance / object_store options for `az://CONTAINER/...` URIs on this server."""
        return {
            "azure_storage_account_name": self.account,
            "azure_storage_account_key": self.account_key,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }

    def create_container(self, name: str) -> str:
        """Create container `name` (idempotent) and return its name: one request signed with the account key."""
        try:
            self._request("PUT", f"/{name}", "restype=container")
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # ContainerAlreadyExists
                raise
        return name

    # -- internals ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, query: str) -> int:
        """A Blob service request with Shared Key authorization (no body, no other headers)."""
        date = formatdate(usegmt=True)
        headers = f"x-ms-date:{date}\nx-ms-version:{_API_VERSION}\n"
        resource = f"/{self.account}/{self.account}{path}\n" + "\n".join(
            ":".join(pair.split("=", 1)) for pair in sorted(query.split("&"))
        )
        signed = f"{method}\n" + "\n" * 11 + headers + resource
        digest = hmac.new(base64.b64decode(self.account_key), signed.encode(), hashlib.sha256).digest()
        request = urllib.request.Request(
            f"{self.endpoint}{path}?{query}",
            method=method,
            headers={
                "x-ms-date": date,
                "x-ms-version": _API_VERSION,
                "Authorization": f"SharedKey {self.account}:{base64.b64encode(digest).decode()}",
                "Content-Length": "0",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _attempt(self, attempt: int) -> None:
        self.port = free_ports(1)[0]
        command = [
            azurite_binary(),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(self.port),
            "--inMemoryPersistence",
            "--extentMemoryLimit",
            str(_MEMORY_MB),
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--silent",
        ]
        if self._log is not None:
            self._log.close()
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {' '.join(command)}\n".encode())
        self._log.flush()
        self._process = start_server(
            command,
            cwd=self.root,
            env={**os.environ, "HOME": str(self.root)},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        """Poll a signed request until Azurite answers it (any HTTP answer: it is up and checks signatures)."""
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EarlyExit
            try:
                self._request("GET", "", "comp=list")
                return
            except urllib.error.HTTPError:
                return
            except OSError as exc:  # refused while starting
                last = exc
            time.sleep(0.1)
        raise TimeoutError(
            f"Azurite at {self.endpoint} not ready after {self.start_timeout:.0f} s "
            f"(last error: {last!r}); log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def _discard_attempt(self) -> None:
        if self._process is not None:
            stop_process_group(self._process)
            self._process = None

    def _startup_failure(self, exc: EarlyExit) -> str:
        return f"azurite-blob exited during start-up {self.start_attempts} times; log {self.log_path}:\n" + (
            log_tail(self.log_path)
        )

    def _release(self, timeout: float) -> None:
        if self._process is not None:
            stop_process_group(self._process, timeout)
            self._process = None
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
