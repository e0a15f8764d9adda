"""A real Dagster deployment on loopback for end-to-end tests: dagster-webserver and dagster-daemon.

Both load the project's workspace.yaml with a private DAGSTER_HOME holding the
project's dagster.yaml (sqlite storage, queued runs, concurrency limits), or
another instance config such as docs/deploy/dagster-postgres.yaml, so runs
launched by the daemon are separate processes exactly as in production.
With `code_server`, the location is served as in docs/deploy/ instead: the
command of memwal-code-server.service and docs/deploy/workspace.yaml, on a free port.
The table list comes from a YAML file passed as MEMWAL_TABLES.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from tests.support.paths import PROJECT_ROOT
from tests.support.service import (
    LOOPBACK,
    EarlyExit,
    LoopbackService,
    crash,
    descendants,
    free_ports,
    log_tail,
    start_server,
    stop_process_group,
)

LOCATION = "memwal_pipelines.definitions"
REPOSITORY = "__repository__"
BIN_DIR = Path(sys.executable).parent
WORKSPACE = str(PROJECT_ROOT / "workspace.yaml")
DEPLOY = PROJECT_ROOT / "docs" / "deploy"
DEPLOYED_BIN = "/opt/memwal/.venv/bin/"
DEPLOYED_PORT = "4266"
DG = BIN_DIR / "dg"
# A Dagster project of its own, with memwal installed: what `dg init` writes, loading its defs folder.
NEW_PROJECT = """\
[project]
name = "shop"
version = "0.1.0"
requires-python = ">=3.11"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "shop"
"""
NEW_DEFINITIONS = """\
from pathlib import Path

import yaml

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def new_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A new Dagster project `shop` under `tmp_path` with an empty defs folder; its root and the environment
    `dg` runs in there (its own DAGSTER_HOME, no MEMWAL_TABLES)."""
    root = tmp_path / "shop"
    (root / "shop" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(NEW_PROJECT)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "defs" / "__init__.py").write_text("")
    (root / "shop" / "definitions.py").write_text(NEW_DEFINITIONS)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MEMWAL_TABLES")}
    return root, {**env, "DAGSTER_HOME": str(tmp_path / "home")}


def deployed_code_server(port: int) -> list[str]:
    """memwal-code-server.service's command, with this venv's executable and `port`."""
    unit = (DEPLOY / "memwal-code-server.service").read_text()
    command = shlex.split(next(line for line in unit.splitlines() if line.startswith("ExecStart=")))
    command[0] = command[0].removeprefix("ExecStart=").replace(DEPLOYED_BIN, f"{BIN_DIR}/")
    return [str(port) if part == DEPLOYED_PORT else part for part in command]


def location_loaded(url: str) -> bool:
    """Whether the webserver at `url` answers with memwal's code location, and only it, loaded."""
    query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            entries = json.loads(response.read())["data"]["workspaceOrError"]["locationEntries"]
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return False
    return [(e["name"], e["loadStatus"]) for e in entries] == [(LOCATION, "LOADED")]


class DagsterDeployment(LoopbackService):
    """`dagster-webserver` and `dagster-daemon run` for one table list."""

    def __init__(
        self,
        tables_file: Path,
        *,
        env: dict[str, str] | None = None,
        start_timeout: float = 180.0,
        instance_yaml: Path = PROJECT_ROOT / "dagster.yaml",
        code_server: bool = False,
    ) -> None:
        super().__init__(prefix="memwal-dagster-", start_timeout=start_timeout, base_dir=None)
        self.tables_file = tables_file
        self.instance_yaml = instance_yaml
        self.extra_env = env or {}
        self.home = self.root / "home"
        self.code_server = code_server
        self.workspace = WORKSPACE
        self.port = 0
        self.grpc_port = 0  # the code server's, with `code_server`
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._commands: dict[str, list[str]] = {}
        self._logs: dict[str, IO[bytes]] = {}

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self._processes.items()}

    def alive(self, name: str) -> bool:
        """Whether the process `name` still runs (one that died is reaped here)."""
        return self._processes[name].poll() is None

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "MEMWAL_TABLES": str(self.tables_file),
            **self.extra_env,
        }

    def _running(self) -> bool:
        return bool(self._processes) and all(p.poll() is None for p in self._processes.values())

    def _prepare(self) -> None:
        from dagster import DagsterInstance
        from dagster._core.instance.ref import InstanceRef

        self.home.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.instance_yaml, self.home / "dagster.yaml")
        # Create the storage here, once: the webserver, the daemon and the code server
        # starting together on an empty DAGSTER_HOME race to stamp its schema (seen: alembic's
        # "Version table 'alembic_version' has more than one head present"). An instance config
        # that reads `{env: ...}` reads this process's environment here.
        DagsterInstance.from_ref(InstanceRef.from_dir(str(self.home))).dispose()

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed in _release
        self._logs[name] = log
        self._commands[name] = args
        self._processes[name] = start_server(
            args,
            cwd=PROJECT_ROOT,
            env={**self.env(), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_for_code_server(self) -> None:
        """Until the code server listens: it loads the definitions first, and a webserver started
        before then would record the location as failed to load."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._processes["code_server"].poll() is not None:
                raise EarlyExit(f"code_server exited with {self._processes['code_server'].returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((LOOPBACK, self.grpc_port), timeout=1),
            ):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the code server did not listen within {self.start_timeout:.0f} s")

    def _daemon(self) -> list[str]:
        return [str(BIN_DIR / "dagster-daemon"), "run", "-w", self.workspace]

    def _attempt(self, attempt: int) -> None:
        self.port, grpc_port = free_ports(2)
        if self.code_server:
            self.grpc_port = grpc_port
            self._spawn("code_server", deployed_code_server(grpc_port))
            self.wait_for_code_server()
            workspace = self.root / "workspace.yaml"
            deployed = (DEPLOY / "workspace.yaml").read_text()
            workspace.write_text(deployed.replace(f"port: {DEPLOYED_PORT}", f"port: {grpc_port}"))
            self.workspace = str(workspace)
        self._spawn(
            "webserver",
            [str(BIN_DIR / "dagster-webserver"), "-h", LOOPBACK, "-p", str(self.port), "-w", self.workspace],
        )
        self._spawn("daemon", self._daemon())
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for name, process in self._processes.items():
                if process.poll() is not None:
                    raise EarlyExit(f"{name} exited with {process.returncode}")
            if self._location_loaded():
                return
            time.sleep(0.5)
        raise TimeoutError(f"Dagster not ready after {self.start_timeout:.0f} s; logs in {self.root}")

    def _location_loaded(self) -> bool:
        """Whether the code location loaded; a location that failed to load fails the start."""
        try:
            data = self.graphql(
                """{ workspaceOrError { ... on Workspace { locationEntries {
                     loadStatus
                     locationOrLoadError { __typename ... on PythonError { message } }
                   } } } }"""
            )
        except (OSError, urllib.error.URLError, ValueError):
            return False
        entries = data.get("workspaceOrError", {}).get("locationEntries", [])
        if not entries or any(e["loadStatus"] != "LOADED" for e in entries):
            return False
        loaded = [e["locationOrLoadError"] or {} for e in entries]
        for location in loaded:
            if location.get("__typename") == "PythonError":
                raise RuntimeError(f"code location failed to load: {location.get('message', '')[:500]}")
        return all(location.get("__typename") == "RepositoryLocation" for location in loaded)

    def kill_tree(self, name: str) -> list[int]:
        """kill -9 of one process and every process below it at once (the daemon's code server and run
        workers, the code server's runs), as the OOM killer or a lost host ends a unit: nothing below
        it gets to say so."""
        process = self._processes[name]
        tree = [process.pid, *descendants(process.pid)]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)
        return tree

    def crash_process(self, name: str) -> list[int]:
        """kill -9 of one process ("daemon", "code_server", "webserver") as its unit sees a crash: the
        processes below it (a code server's run workers) get SIGTERM, then SIGKILL (service.crash)."""
        process = self._processes[name]
        killed = crash(process.pid)
        process.wait(timeout=30)
        return killed

    def terminate_process(self, name: str, timeout: float = 30.0) -> None:
        """Stop one process as `systemctl stop` does: SIGTERM to it and what it started, SIGKILL to those
        alive `timeout` seconds later (the code server waits for its runs)."""
        stop_process_group(self._processes[name], timeout)

    def restart_process(self, name: str, env: dict[str, str] | None = None) -> None:
        """Start a process that died again, with the same command (as systemd's Restart= does), `env`
        added for this start only (a stepped clock, say)."""
        self._logs.pop(name).close()
        self._spawn(name, self._commands[name], env)

    def _discard_attempt(self) -> None:
        self._release(10.0)

    def _startup_failure(self, exc: EarlyExit) -> str:
        tails = "\n".join(f"--- {name}\n{log_tail(self.root / f'{name}.log')}" for name in self._processes)
        return f"Dagster did not start: {exc}\n{tails}"

    def _release(self, timeout: float) -> None:
        for process in self._processes.values():
            stop_process_group(process, timeout)
        for log in self._logs.values():
            log.close()
        self._processes.clear()
        self._logs.clear()

    # -- GraphQL ------------------------------------------------------------------------------

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.loads(response.read())
        if payload.get("errors"):
            raise ValueError(f"GraphQL errors: {payload['errors']}")
        data: dict[str, Any] = payload["data"]
        return data

    def _start_once(self, kind: str, name: str) -> str:
        """One startSensor or startSchedule mutation (`kind`: "Sensor" or "Schedule"); the new status."""
        field = kind[0].lower() + kind[1:]
        # What a start answers: the sensor itself, or (for a schedule) its new state.
        answer = "Sensor" if kind == "Sensor" else "ScheduleStateResult"
        data = self.graphql(
            f"""mutation($selector: {kind}Selector!) {{
                 start{kind}({field}Selector: $selector) {{
                   __typename
                   ... on {answer} {{ {field}State {{ status }} }}
                   ... on PythonError {{ message }}
                 }}
               }}""",
            {
                "selector": {
                    "repositoryLocationName": LOCATION,
                    "repositoryName": REPOSITORY,
                    f"{field}Name": name,
                }
            },
        )
        result = data[f"start{kind}"]
        state = result.get(f"{field}State")
        if state is None:
            raise RuntimeError(f"{field} {name} did not start: {result}")
        status: str = state["status"]
        return status

    def _start(self, kind: str, name: str, timeout: float) -> str:
        """Turn a sensor or schedule on, as the UI toggle does, retrying while the webserver answers
        {kind}NotFoundError.

        Right after the location reports LOADED, the webserver's request context
        can still miss the location's sensors for a moment (seen about one start
        in three on a loaded machine).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._start_once(kind, name)
            except RuntimeError as exc:
                if f"{kind}NotFoundError" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def start_sensor(self, name: str, timeout: float = 60.0) -> str:
        return self._start("Sensor", name, timeout)

    def start_schedule(self, name: str, timeout: float = 60.0) -> str:
        return self._start("Schedule", name, timeout)
