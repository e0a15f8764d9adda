"""Benchmark: where the time of one merge on Spark Connect goes, as memwal ran it before and now.

Two Spark Connect servers (pyspark's own, 127.0.0.1, local[*,2]), both started
here, one per way of running:
  before  pyspark's own Python daemon, a new session for every run (released at its end), and
          nothing run before the first client
  after   memwal's daemon (pyarrow, lance and memwal loaded before workers fork), the one
          session memwal's clients share, and a warm-up job when the server starts
First the `memwal merge` command on the demo table, wall time: `--engine local`, then
`--engine spark` against each server (its first run after the server started, then the
later ones), then the default (`--spark-remote`: Spark for rounds over the threshold).
Then each phase of one merge on Spark, every run in a new process as the command runs:
  start     interpreter start and memwal's imports (the command's)
  session   the Connect session opened (before) or joined (after)
  slots     asking Spark for its parallelism (one small job)
  workers   the first job's fixed cost: Python workers starting and importing on the server
            (a no-op job; the collapse after it finds them started)
  plan, collapse, commit   the merge's own phases (collapse: the Spark job writing staged
            rows; commit: reading them back and Lance's commit)
  end       the session's end
The table is restored to its pre-merge version before each run; the load average is
printed beside each figure.

Usage: python bench/spark_phases.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("start", "session", "slots", "workers", "plan", "collapse", "commit", "end")


def child(url: str, table_uri: str, started: float) -> None:
    """One run's phases, as JSON on stdout (`started`: the parent's clock when it spawned this process)."""
    sys.path.insert(0, str(ROOT))
    import memwal_core.cli.main  # noqa: F401  # what the command imports
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.engine import SparkEngine
    from memwal_core.services.merge.service import merge

    marks = {"start": time.time() - started}
    clock = time.perf_counter()

    def mark(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        marks[phase] = now - clock
        clock = now

    engine = SparkEngine(remote=url)
    engine.session  # noqa: B018
    mark("session")
    engine.parallelism()
    mark("slots")
    engine.run(lambda item: item, [0, 1], what="no-op")
    mark("workers")
    with MemWalTable.open(table_uri) as table:
        result = merge(table, engine=engine)
    assert not result.failures and result.engine == "spark", result.failures
    marks["plan"] = result.seconds_plan
    marks["collapse"] = sum(b.seconds_collapse for b in result.batches)
    marks["commit"] = sum(b.seconds_commit for b in result.batches)
    clock = time.perf_counter()
    engine.close()
    mark("end")
    print(json.dumps(marks))


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def cli_seconds(table_uri: str, *flags: str) -> float:
    """Wall time of `memwal merge TABLE FLAGS` in a new process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "merge", table_uri, "--json", *flags],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", nargs=3, metavar=("URL", "TABLE", "STARTED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], float(args.child[2]))
        return
    sys.path.insert(0, str(ROOT))
    import lance

    from memwal_core.connect_server import ConnectServer
    from memwal_core.demo import write_demo_table
    from tests.support.tables import restore_backlog

    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "demo")
        write_demo_table(uri)
        version = lance.dataset(uri).version
        servers = {
            "before": ConnectServer(Path(tmp) / "before"),
            "after": ConnectServer(Path(tmp) / "after"),
        }
        try:
            started = time.perf_counter()
            servers["before"].start(
                conf={
                    "spark.python.daemon.module": "pyspark.daemon",
                    "spark.connect.session.manager.defaultSessionTimeout": "60m",
                },
                warm=False,
            )
            servers["after"].start()
            print(f"servers ready in {time.perf_counter() - started:.1f} s; {args.runs} runs each\n")

            def own(name: str) -> str:
                """The URL's tail: before, a session of its own per run, as memwal opened them."""
                return f"/;session_id={uuid.uuid4()}" if name == "before" else ""

            print("memwal merge on the demo table (wall seconds; the first Spark run is the server's first)")
            local = []
            for _ in range(args.runs):
                restore_backlog(uri, version)
                local.append(cli_seconds(uri, "--engine", "local"))
            print(f"  --engine local                  median {statistics.median(local):.2f}  (load {load()})")
            for name, server in servers.items():
                runs = []
                for _ in range(args.runs):
                    restore_backlog(uri, version)
                    runs.append(
                        cli_seconds(uri, "--engine", "spark", "--spark-remote", server.url + own(name))
                    )
                print(
                    f"  --engine spark ({name:<6})        first {runs[0]:.2f}, then median "
                    f"{statistics.median(runs[1:]):.2f}; first/local {runs[0] / statistics.median(local):.2f}, "
                    f"later/local {statistics.median(runs[1:]) / statistics.median(local):.2f}  (load {load()})"
                )
            default = []
            for _ in range(args.runs):
                restore_backlog(uri, version)
                default.append(cli_seconds(uri, "--spark-remote", servers["after"].url))
            print(
                f"  --spark-remote (threshold)      median {statistics.median(default):.2f}; "
                f"/local {statistics.median(default) / statistics.median(local):.2f}  (load {load()})\n"
            )

            print("one merge on Spark, by phase (median seconds of the runs)")
            print("  " + " " * 8 + "".join(f"{phase:>9}" for phase in PHASES) + "      sum")
            for name, server in servers.items():
                marks: dict[str, list[float]] = {phase: [] for phase in PHASES}
                for _ in range(args.runs):
                    restore_backlog(uri, version)
                    done = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--child",
                            server.url + own(name),
                            uri,
                            str(time.time()),
                        ],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    assert done.returncode == 0, done.stderr[-2000:]
                    for phase, seconds in json.loads(done.stdout.strip().splitlines()[-1]).items():
                        marks[phase].append(seconds)
                medians = [statistics.median(marks[phase]) for phase in PHASES]
                cells = "".join(f"{m:9.2f}" for m in medians)
                print(f"  {name:<8}{cells}{sum(medians):9.2f}  (load {load()})")
        finally:
            for server in servers.values():
                server.stop()


if __name__ == "__main__":
    main()
