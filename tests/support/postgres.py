"""A real PostgreSQL server on loopback, from Debian's `postgresql` package, for tests.

Dagster's production instance keeps its runs, event logs and schedules in
PostgreSQL, so the test of that deployment runs the real server: a private
cluster made by `initdb` in a temp directory, listening on 127.0.0.1 only (on
a free port, its Unix socket inside the temp directory) and stopped by PID.
It never touches a cluster the package itself may have started on port 5432.

`initdb` and `postgres` refuse to run as root, and CI runs as root: then both
run as the `postgres` system user the package creates (through `setpriv`),
and the temp directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import signal
import subprocess
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

# Debian installs each major version's server binaries under /usr/lib/postgresql/<major>/bin.
DEBIAN_POSTGRES_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"


def postgres_bin_dir(root: Path = DEBIAN_POSTGRES_ROOT) -> Path:
    """The newest installed major version's bin directory holding `initdb` and `postgres`."""
    found = [
        path
        for path in root.glob("*/bin")
        if re.fullmatch(r"\d+", path.parent.name)
        and all(os.access(path / tool, os.X_OK) for tool in ("initdb", "postgres"))
    ]
    if not found:
        raise FileNotFoundError(
            f"PostgreSQL server binaries (initdb, postgres) not found under {root}/<major>/bin: "
            "install Debian's postgresql package (apt-get install postgresql; .ci/run does)"
        )
    return max(found, key=lambda path: int(path.parent.name))


def _server_user_prefix() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that drops root to the server user, and that user (none unless root)."""
    if os.geteuid() != 0:
        return [], None
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise RuntimeError(
            f"running as root, and PostgreSQL refuses root: the '{SERVER_USER}' system user "
            "(created by Debian's postgresql package) is missing"
        ) from None
    prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]
    return prefix, user


class PostgresServer(LoopbackService):
    """One `postgres` process over a fresh cluster whose superuser logs in with a random password.

    Password authentication (scram-sha-256) is on for every connection, so a
    client that reads the password from the wrong place fails as it would in
    production. Use as a context manager or call `stop()`.
    """

    user = "memwal"

    def __init__(self, *, start_timeout: float = 60.0) -> None:
        # Not under pytest's temp dir: its parents are private to root, and the server user must reach this one.
        super().__init__(prefix="memwal-postgres-", start_timeout=start_timeout, base_dir=None)
        self.bin_dir = postgres_bin_dir()
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.data_dir = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self._prefix, self._server_user = _server_user_prefix()
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def pid(self) -> int | None:
        """PID of the postmaster (setpriv executes it in place, so it is the process started here)."""
        return None if self._process is None else self._process.pid

    def connect(self, db_name: str = "postgres") -> Any:
        """A psycopg2 connection over TCP with the password, as Dagster connects."""
        import psycopg2

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=db_name,
            connect_timeout=5,
        )

    def dagster_env(self, db_name: str) -> dict[str, str]:
        """The DAGSTER_PG_* variables docs/deploy/dagster-postgres.yaml reads, for database `db_name`."""
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": db_name,
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
        }

    def create_database(self, name: str) -> str:
        """Create database `name` and return its name."""
        from psycopg2 import sql

        connection = self.connect()
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            connection.close()
        return name

    # -- LoopbackService hooks ------------------------------------------------------------

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _prepare(self) -> None:
        """`initdb` a cluster owned by the server user, its superuser's password read from a file."""
        password_file = self.root / "password"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        self._hand_to_server_user(self.root, password_file)
        try:
            self._run_as_server_user(
                [
                    str(self.bin_dir / "initdb"),
                    f"--pgdata={self.data_dir}",
                    f"--username={self.user}",
                    f"--pwfile={password_file}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        finally:
            password_file.unlink()

    def _relaunch(self) -> None:
        """The same port and cluster: the server recovers from its WAL after a crash."""
        self._launch()

    def _attempt(self, attempt: int) -> None:
        (self.port,) = free_ports(1)
        self._launch()

    def _launch(self) -> None:
        """Start `postgres` on `port` and wait until it answers."""
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._process = start_server(
            [
                *self._prefix,
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={LOOPBACK}",
                "-c",
                f"unix_socket_directories={self.root}",
                # A throwaway cluster: durability across a machine crash buys nothing here.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            cwd=self.root,
            env=self._server_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        import psycopg2

        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EarlyExit(f"postgres exited with {self._process.returncode}")
            try:
                self.connect().close()
                return
            except psycopg2.OperationalError:
                time.sleep(0.2)
        raise TimeoutError(
            f"PostgreSQL not ready on {self.host}:{self.port} after {self.start_timeout:.0f} s; "
            f"log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def _discard_attempt(self) -> None:
        self._stop_postmaster(10.0)

    def _startup_failure(self, exc: EarlyExit) -> str:
        return f"PostgreSQL did not start ({exc}); log {self.log_path}:\n{log_tail(self.log_path)}"

    def _release(self, timeout: float) -> None:
        self._stop_postmaster(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- internals ---------------------------------------------------------------------------

    def _stop_postmaster(self, timeout: float) -> None:
        """Fast shutdown (SIGINT: clients are disconnected), then the process group by PID if it lingers.

        SIGTERM, which `stop_process_group` sends, is a smart shutdown that waits for every client.
        """
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=timeout)
        stop_process_group(self._process, timeout)
        self._process = None

    def _server_env(self) -> dict[str, str]:
        """This environment without PG* variables, which would redirect initdb or the server."""
        return {key: value for key, value in os.environ.items() if not key.startswith("PG")}

    def _hand_to_server_user(self, *paths: Path) -> None:
        if self._server_user is not None:
            for path in paths:
                os.chown(path, self._server_user.pw_uid, self._server_user.pw_gid)

    def _run_as_server_user(self, command: list[str]) -> None:
        result = subprocess.run(
            [*self._prefix, *command],
            cwd=self.root,
            env=self._server_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{Path(command[0]).name} failed with {result.returncode}:\n{result.stdout}{result.stderr}"
            )
