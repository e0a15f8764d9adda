"""Spark for tests and benchmarks: a loopback local session and a real standalone cluster.

memwal's Spark engine ships Python functions that `import lance` to the
executors, so tests need executors that run this interpreter. The local
session covers the common case cheaply; `StandaloneSpark` starts a genuine
master and worker (separate JVMs, separate Python workers) from the scripts
in the pyspark wheel, to prove the same code works when executors are not
the driver.

Only one SparkSession can live in a process, so `run_lance_probe` drives the
standalone cluster from a child interpreter (`python -m tests.support.spark`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession


# Schema of the rows `lance_reader` yields.
LANCE_PROBE_SCHEMA = "uri string, rows long, total long, pid long, lance_version string"


def loopback_spark_conf(master: str, shuffle_partitions: int = 4) -> dict[str, str]:
    """Spark settings that keep a driver on 127.0.0.1, without UI, with Arrow and this interpreter."""
    return {
        "spark.master": master,
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.session.timeZone": "UTC",
    }


def _set_loopback_env() -> None:
    """Environment the driver JVM and the Python workers inherit: loopback and this interpreter."""
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def local_spark_session(
    app_name: str = "memwal-tests", extra_conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The process's SparkSession: `local[2]` on loopback, created on first call.

    If a session is already active (a fixture made one) it is returned as is,
    because static settings such as the master cannot change on a live session.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    _set_loopback_env()
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**loopback_spark_conf("local[2]"), **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def lance_reader(uris: Sequence[str]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A `mapInArrow` function over `spark.range`: row `id` opens Lance dataset `uris[id]` on the executor.

    Feeding ids from `range` keeps the job to one stage with no Python on the
    input side. Built by a factory so cloudpickle ships it by value: a
    standalone executor's working directory is not the project, so it could
    not import this module by name.
    """
    targets = list(uris)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        import lance
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = pa.schema(
            [
                ("uri", pa.string()),
                ("rows", pa.int64()),
                ("total", pa.int64()),
                ("pid", pa.int64()),
                ("lance_version", pa.string()),
            ]
        )
        for batch in batches:
            for index in batch.column("id").to_pylist():
                uri = targets[index]
                table = lance.dataset(uri).to_table()
                total = pc.sum(table.column("value")).as_py() if table.num_rows else 0
                yield pa.RecordBatch.from_pydict(
                    {
                        "uri": [uri],
                        "rows": [table.num_rows],
                        "total": [total],
                        "pid": [os.getpid()],
                        "lance_version": [lance.__version__],
                    },
                    schema=schema,
                )

    return read


def write_probe_dataset(uri: str, rows: int = 10) -> int:
    """Write a small Lance dataset with an int64 `value` column; returns the sum of `value`."""
    import lance
    import pyarrow as pa

    lance.write_dataset(pa.table({"value": pa.array(range(rows), pa.int64())}), uri, mode="overwrite")
    return rows * (rows - 1) // 2


def lance_probe(session: SparkSession, uris: Sequence[str]) -> list[dict[str, Any]]:
    """Run `lance_reader` over `uris` (one partition each) and collect the rows as dicts."""
    frame = session.range(0, len(uris), 1, numPartitions=len(uris))
    rows = frame.mapInArrow(lance_reader(uris), LANCE_PROBE_SCHEMA).collect()
    return [row.asDict() for row in rows]


class StandaloneSpark(LoopbackService):
    """A Spark standalone master and its workers (one by default), JVMs on 127.0.0.1, stopped by PID.

    Starts in the constructor (unless `start=False`) and blocks until every
    worker has registered with the master. Logs, the worker's work dir and
    local dirs live in a private temp directory that `stop()` removes.
    """

    def __init__(
        self,
        *,
        cores: int = 2,
        memory: str = "2g",
        workers: int = 1,
        start: bool = True,
        start_timeout: float = 180.0,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        import pyspark

        super().__init__(prefix="memwal-spark-", start_timeout=start_timeout, base_dir=base_dir)
        self.cores = cores
        self.memory = memory
        self.workers = workers
        self.spark_home = Path(pyspark.__file__).parent
        self.master_log = self.root / "master.log"
        self.worker_logs = [self.root / f"worker-{n}.log" for n in range(1, workers + 1)]
        self.master_port = self.master_ui_port = 0
        self.worker_ports: list[tuple[int, int]] = []
        self._pick_ports()
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        if start:
            self.start()

    @property
    def master_url(self) -> str:
        """The URL a SparkSession uses as its master."""
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def master_ui_url(self) -> str:
        """The master's web UI; `/json/` there reports the cluster state."""
        return f"http://{LOOPBACK}:{self.master_ui_port}"

    @property
    def pids(self) -> dict[str, int]:
        """PIDs (and process-group ids) of the running master and workers."""
        running = {"master": self._master, **{f"worker-{n}": w for n, w in enumerate(self._workers, 1)}}
        return {name: proc.pid for name, proc in running.items() if proc is not None}

    def stop(self, timeout: float = 15.0) -> None:
        """Stop worker (with its executors) then master by process group, and delete the temp dir.

        A no-op in a forked child: only the process that started the cluster owns it.
        """
        super().stop(timeout)

    def __repr__(self) -> str:
        return f"StandaloneSpark(master_url={self.master_url!r}, pids={self.pids})"

    def status(self) -> dict[str, Any]:
        """The master's `/json/` report (workers, cores, apps)."""
        with urllib.request.urlopen(f"{self.master_ui_url}/json/", timeout=5) as response:
            report: dict[str, Any] = json.load(response)
        return report

    def client_conf(self) -> dict[str, str]:
        """Settings for a driver that uses this cluster: one executor of `cores` cores per worker."""
        return {
            **loopback_spark_conf(self.master_url),
            "spark.cores.max": str(self.cores * self.workers),
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "1g",
        }

    def run_lance_probe(self, uris: Sequence[str], timeout: float = 300.0) -> list[dict[str, Any]]:
        """Run `lance_probe` over `uris` on this cluster from a child interpreter; returns its rows."""
        driver_log = self.root / f"driver-{time.monotonic_ns()}.log"
        env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        command = [
            sys.executable,
            "-m",
            "tests.support.spark",
            "probe",
            "--conf",
            json.dumps(self.client_conf()),
        ]
        with driver_log.open("wb") as log:
            # Its own process group, so a timeout also ends the driver's JVM.
            driver = start_server(
                [*command, *uris],
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            try:
                stdout, _ = driver.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_process_group(driver, timeout=10.0)
                raise TimeoutError(
                    f"lance probe on {self.master_url} took over {timeout:.0f} s; "
                    f"driver log {driver_log}:\n{log_tail(driver_log)}"
                ) from None
            finally:
                if driver.stdout is not None:
                    driver.stdout.close()
        if driver.returncode != 0:
            raise RuntimeError(
                f"lance probe on {self.master_url} failed with exit code {driver.returncode}; "
                f"driver log {driver_log}:\n{log_tail(driver_log)}"
            )
        rows: list[dict[str, Any]] = json.loads(stdout.decode().strip().splitlines()[-1])
        return rows

    # -- internals ---------------------------------------------------------------------------

    def _running(self) -> bool:
        return self._master is not None and self._master.poll() is None

    def _attempt(self, attempt: int) -> None:
        """Launch master and worker together and wait until the worker is registered.

        They start in parallel because each JVM takes seconds to boot; the
        worker retries registration if it comes up first. Daemons may not
        fall back to the next port (Spark's default), so a port taken since
        `free_ports` makes one exit, and start-up is retried on fresh ports.
        """
        if attempt > 1:
            self._pick_ports()
        self._launch()
        self._wait_for_worker()

    def _startup_failure(self, exc: EarlyExit) -> str:
        return f"spark failed to start {self.start_attempts} times; last: {exc}; logs:\n{self._log_tails()}"

    def _discard_attempt(self) -> None:
        self._stop_processes(timeout=5.0)

    def _release(self, timeout: float) -> None:
        self._stop_processes(timeout)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def _pick_ports(self) -> None:
        self.master_port, self.master_ui_port, *ports = free_ports(2 + 2 * self.workers)
        self.worker_ports = list(zip(ports[::2], ports[1::2], strict=True))

    def _launch(self) -> None:
        self._master = self._spawn(
            "org.apache.spark.deploy.master.Master",
            ["--host", LOOPBACK, "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
            self.master_log,
        )
        self._workers = [
            self._spawn(
                "org.apache.spark.deploy.worker.Worker",
                [
                    self.master_url,
                    *("--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)),
                    *("--cores", str(self.cores), "--memory", self.memory),
                    *("--work-dir", str(self.root / f"work-{n}")),
                ],
                log,
            )
            for n, ((port, ui_port), log) in enumerate(
                zip(self.worker_ports, self.worker_logs, strict=True), 1
            )
        ]

    def _stop_processes(self, timeout: float) -> None:
        for proc in (*self._workers, self._master):
            if proc is not None:
                stop_process_group(proc, timeout)
        self._workers = []
        self._master = None

    def _env(self) -> dict[str, str]:
        """Daemon environment: loopback only, private dirs, no REST submission server (port 6066)."""
        conf_dir = self.root / "conf"
        conf_dir.mkdir(exist_ok=True)
        (self.root / "local").mkdir(exist_ok=True)
        env = dict(os.environ)
        for key in ("SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_CONF_DIR"):
            env.pop(key, None)
        env.update(
            {
                "SPARK_HOME": str(self.spark_home),
                # An empty conf dir: no spark-env.sh or spark-defaults.conf from elsewhere.
                "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOG_DIR": str(self.root),
                "SPARK_LOCAL_DIRS": str(self.root / "local"),
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                # Fail on a taken port instead of silently binding the next one.
                "SPARK_DAEMON_JAVA_OPTS": "-Dspark.port.maxRetries=0",
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        return env

    def _spawn(self, main_class: str, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Run `bin/spark-class main_class ...` in its own session; spark-class execs java, keeping the PID."""
        log = log_path.open("ab")
        self._logs.append(log)
        log.write(f"\n=== {main_class} {' '.join(args)}\n".encode())
        log.flush()
        return start_server(
            [str(self.spark_home / "bin" / "spark-class"), main_class, *args],
            cwd=self.root,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def _wait_for_worker(self) -> None:
        """Poll the master's `/json/` until it reports an alive worker."""
        deadline = time.monotonic() + self.start_timeout
        last: object = None
        while time.monotonic() < deadline:
            for name, proc in (("master", self._master), *(("worker", w) for w in self._workers)):
                if proc is None or proc.poll() is not None:
                    raise EarlyExit(f"spark {name} exited during start-up")
            try:
                report = self.status()
                last = {key: report.get(key) for key in ("status", "aliveworkers")}
                if report.get("status") == "ALIVE" and int(report.get("aliveworkers", 0)) >= self.workers:
                    return
            except (OSError, ValueError, urllib.error.URLError) as exc:
                last = exc
            time.sleep(0.2)
        raise TimeoutError(
            f"spark worker not registered with {self.master_url} after {self.start_timeout:.0f} s "
            f"(last: {last!r}); logs:\n{self._log_tails()}"
        )

    def _log_tails(self) -> str:
        return "\n".join(f"--- {path}\n{log_tail(path, 25)}" for path in (self.master_log, *self.worker_logs))


def _main(argv: list[str] | None = None) -> int:
    """Child-process driver for `StandaloneSpark.run_lance_probe`: prints the rows as JSON."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.spark")
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="run the mapInArrow Lance probe and print its rows as JSON")
    probe.add_argument("--conf", required=True, help="JSON object of Spark settings (incl. spark.master)")
    probe.add_argument("uris", nargs="+")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    _set_loopback_env()
    builder = SparkSession.builder.appName("memwal-lance-probe")
    for key, value in json.loads(args.conf).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        session.sparkContext.setLogLevel("WARN")
        rows = lance_probe(session, args.uris)
        rows = [{**row, "driver_pid": os.getpid()} for row in rows]
    finally:
        session.stop()
    print(json.dumps(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
