"""A real Prometheus server (Debian's `prometheus` package) and memwal's exporter, on loopback, for tests.

The server scrapes the exporter every second and evaluates the rule files it
is given every second, with its storage in a private temp directory; both
processes are stopped by their PID (process group).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from tests.support.paths import PROJECT_ROOT
from tests.support.service import (
    LOOPBACK,
    EarlyExit,
    LoopbackService,
    free_ports,
    log_tail,
    start_server,
    stop_process_group,
)

T = TypeVar("T")
ALERT_RULES = PROJECT_ROOT / "docs" / "deploy" / "memwal-alerts.yml"


def prometheus_binary(name: str = "prometheus") -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install Debian's prometheus package (.ci/run does)")
    return found


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll `probe` until it returns something other than None (or a falsy value), else fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last answer {last!r})")


class OneProcess(LoopbackService):
    """A service of one process on a free loopback port, ready once `_ready()` answers."""

    log_name = "server.log"

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix=prefix, start_timeout=60.0, base_dir=None)
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> None:
        """Return once the server answers; raise OSError while it does not."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _relaunch(self) -> None:
        self._launch()

    def _attempt(self, attempt: int) -> None:
        (self.port,) = free_ports(1)
        self._launch()

    def _launch(self) -> None:
        """Start the process on `port` and wait until it answers."""
        if self._log is not None:
            self._log.close()
        self._log = (self.root / self.log_name).open("ab")
        self._process = start_server(
            self._command(),
            cwd=PROJECT_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EarlyExit(f"{self._command()[0]} exited with {self._process.returncode}")
            try:
                self._ready()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"{self._command()[0]} did not answer within {self.start_timeout:.0f} s")

    def _discard_attempt(self) -> None:
        self._release(10.0)

    def _startup_failure(self, exc: EarlyExit) -> str:
        return f"{exc}:\n{log_tail(self.root / self.log_name)}"

    def _release(self, timeout: float) -> None:
        if self._process is not None:
            stop_process_group(self._process, timeout)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None


class Exporter(OneProcess):
    """`memwal metrics TABLE... --listen 127.0.0.1:PORT` in a process of its own.

    `open_files` caps its file descriptors (systemd's default soft limit is 1,024).
    """

    log_name = "exporter.log"

    def __init__(self, tables: Sequence[str], *args: str, open_files: int | None = None) -> None:
        super().__init__("memwal-exporter-")
        self.tables = list(tables)
        self.args = list(args)
        self.open_files = open_files

    @property
    def target(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def scrape(self, timeout: float = 30) -> str:
        with urllib.request.urlopen(f"http://{self.target}/metrics", timeout=timeout) as response:
            text: str = response.read().decode()
            return text

    def log(self) -> str:
        """What the exporter wrote to stdout and stderr so far."""
        return (self.root / self.log_name).read_text(errors="replace")

    def _command(self) -> list[str]:
        limit = [] if self.open_files is None else ["prlimit", f"--nofile={self.open_files}", "--"]
        memwal = [sys.executable, "-m", "memwal_core.cli.main", "metrics"]
        return [*limit, *memwal, *self.tables, "--listen", self.target, *self.args]

    def _ready(self) -> None:
        self.scrape()


class PrometheusServer(OneProcess):
    """`prometheus` scraping `targets` every second and evaluating `rule_files` every second."""

    log_name = "prometheus.log"

    def __init__(self, targets: Sequence[str], rule_files: Sequence[Path] = (ALERT_RULES,)) -> None:
        super().__init__("memwal-prometheus-")
        self.targets = list(targets)
        self.rule_files = list(rule_files)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector `expression` evaluates to now."""
        answer = get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}")
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, expression: str) -> float | None:
        """The single value `expression` evaluates to now, or None if it has none."""
        result = self.query(expression)
        return float(result[0]["value"][1]) if result else None

    def alerts(self, state: str = "firing") -> list[dict[str, str]]:
        """The labels of every alert in `state` now."""
        answer = get_json(f"{self.url}/api/v1/alerts")
        return [a["labels"] for a in answer["data"]["alerts"] if a["state"] == state]

    def _prepare(self) -> None:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [{"job_name": "memwal", "static_configs": [{"targets": self.targets}]}],
        }
        (self.root / "prometheus.yml").write_text(json.dumps(config))

    def _command(self) -> list[str]:
        return [
            prometheus_binary(),
            f"--config.file={self.root / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
        ]

    def _ready(self) -> None:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5):
            pass
