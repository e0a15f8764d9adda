"""pyspark's own Spark Connect server on 127.0.0.1: the warm Spark that short runs connect to.

A classic SparkSession costs every run a JVM start (7-15 s, more under load);
a Connect server pays it once and serves every run after it (`sc://`). The
server is pyspark's bundled one (`pyspark/sbin/start-connect-server.sh`,
which runs `spark-daemon.sh`): its pid file and logs go in `home`, its gRPC
port binds 127.0.0.1 only, and it runs this interpreter's Python workers, so
tasks import the same pylance and memwal. Its workers fork from memwal's
daemon (pyarrow, lance and memwal loaded), and the session memwal's clients
share lives while the server does, so a run's first task starts as fast as
its tenth (`spark_session.py`). `ConnectServer.find` reuses one a
former command left running; whoever started a server stops it, by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from memwal_core.errors import MemwalError
from memwal_core.spark_session import DAEMON_MODULE, LOOPBACK

# Where the daemon script writes its pid file: spark-{ident}-{class}-{instance}.pid.
_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_IDENT = "memwal"
STATE_FILE = "connect-server.json"
DEFAULT_MASTER = "local[*,2]"
_MEMWAL_ROOT = str(Path(__file__).resolve().parent.parent)
# Spark closes a session idle for an hour by default, and its Python daemon with it only in name
# (Spark 4.3 keeps the process): the session memwal's runs share should outlive the gaps between runs.
SESSION_TIMEOUT = "30d"
# The server's heap (Spark's default driver heap, stated), committed and touched when the JVM starts
# (-Xms as -Xmx, AlwaysPreTouch). Left to grow, the heap took the server from 33 to 787 MiB in steps
# over its first hour (the 2-hour chaos run, seed 7), which a leak cannot be told from; a heap that
# is all resident from the start is a budget, and what grows past it is the leak.
HEAP = "1g"
# How often the server collects its heap whole. Spark compiles each query's code into classes with a
# loader of their own, and G1 unloads them only in a whole-heap collection, which a heap kept mostly
# empty never starts by itself. At Spark's default (30 minutes) the server grew 78 MiB an hour in
# the chaos run (seed 8; metaspace 168 MiB in 966 class loaders after 31 minutes); one whole
# collection after 300 short queries unloaded 1,036 classes.
WHOLE_GC_INTERVAL = "5min"
# glibc malloc's arenas for the server's process (see start()).
MALLOC_ARENAS = "2"


def _started(slot: int) -> int:
    """The warm-up's task: nothing beyond a Python worker started on the server."""
    return slot


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1.0):
            return True
    except OSError:
        return False


class ConnectServer:
    """One local Spark Connect server whose pid file, logs and state live in `home`."""

    def __init__(self, home: str | os.PathLike[str], port: int | None = None) -> None:
        import pyspark

        self.home = Path(home)
        self.port = port or _free_port()
        self.spark_home = Path(pyspark.__file__).parent
        self.pid_file = self.home / f"spark-{_IDENT}-{_CLASS}-1.pid"
        self.log_dir = self.home / "logs"

    @property
    def url(self) -> str:
        """What a client names as its remote."""
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server JVM's PID, while its pid file names a live process."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def running(self) -> bool:
        """Its JVM lives and its port accepts connections."""
        return self.pid is not None and _accepts(self.port)

    @classmethod
    def find(cls, home: str | os.PathLike[str]) -> ConnectServer | None:
        """The server a former command started in `home`, if it still runs."""
        try:
            state = json.loads((Path(home) / STATE_FILE).read_text())
            server = cls(home, int(state["port"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return server if server.running() else None

    def start(
        self,
        *,
        master: str = DEFAULT_MASTER,
        conf: Mapping[str, str] | None = None,
        timeout: float = 180.0,
        warm: bool = True,
    ) -> None:
        """Start the server, wait until it accepts clients and (unless not `warm`) warm it; a failure
        names its log."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.home / "conf").mkdir(exist_ok=True)
        settings = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.python.daemon.module": DAEMON_MODULE,
            "spark.connect.session.manager.defaultSessionTimeout": SESSION_TIMEOUT,
            "spark.driver.memory": HEAP,
            "spark.cleaner.periodicGC.interval": WHOLE_GC_INTERVAL,
            **(conf or {}),
        }
        given = (conf or {}).get("spark.driver.extraJavaOptions", "")
        heap = settings["spark.driver.memory"]
        settings["spark.driver.extraJavaOptions"] = f"-Xms{heap} -XX:+AlwaysPreTouch {given}".strip()
        command = [str(self.spark_home / "sbin" / "start-connect-server.sh"), "--master", master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            # An empty conf dir: no spark-env.sh or spark-defaults.conf from elsewhere.
            "SPARK_CONF_DIR": str(self.home / "conf"),
            "SPARK_PID_DIR": str(self.home),
            "SPARK_LOG_DIR": str(self.log_dir),
            "SPARK_IDENT_STRING": _IDENT,
            "SPARK_LOCAL_IP": LOOPBACK,
            # glibc's malloc gives threads arenas of their own, up to 8 a core, and Spark's query pools
            # start and retire threads by the hundred: 800 short queries grew the server's resident
            # memory 49 MiB more than the JVM's committed memory grew (Native Memory Tracking), 32
            # with two arenas.
            "MALLOC_ARENA_MAX": MALLOC_ARENAS,
            "PYSPARK_PYTHON": sys.executable,
            # Workers import memwal (its daemon first) from where this process does, installed or not.
            "PYTHONPATH": os.pathsep.join(filter(None, [_MEMWAL_ROOT, os.environ.get("PYTHONPATH")])),
        }
        # Its own session: a terminal's Ctrl-C reaches the command that owns the server, which stops it.
        subprocess.run(
            command,
            env=env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            check=False,
        )
        # The daemon script has written the pid file when it returns; a JVM that died since failed to start.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (pid := self.pid) is not None:
            if _accepts(self.port):
                if warm:
                    self._warm()
                (self.home / STATE_FILE).write_text(json.dumps({"port": self.port, "pid": pid}))
                return
            time.sleep(0.2)
        self.stop()
        raise MemwalError(
            f"the Spark Connect server did not start on {self.url}; see its log in {self.log_dir}"
        )

    def _warm(self) -> None:
        """Run one job on every task slot in the session memwal's clients share, so the first run finds
        the JVM's planning code compiled and the Python daemon and workers started: it costs what later
        runs do. A server whose workers cannot start is stopped, and why said."""
        from memwal_core.spark_session import connect_session, default_parallelism, executor_error, run_tasks

        session = connect_session(self.url)
        try:
            run_tasks(session, _started, range(default_parallelism(session)), what="warm-up")
        except Exception as exc:
            self.stop()
            raise MemwalError(
                f"the Spark Connect server on {self.url} cannot run tasks: {executor_error(exc)}"
            ) from exc
        finally:
            session.client.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server JVM by its PID (TERM, then KILL) and forget it."""
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for path in (self.pid_file, self.home / STATE_FILE):
            path.unlink(missing_ok=True)
