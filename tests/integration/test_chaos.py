"""The chaos run's short mode: the deployment of docs/deploy/ loses nothing under its faults and resumes.

`bench/chaos.py --short` runs as a subprocess (it starts SeaweedFS, PostgreSQL, the code server, the
Dagster daemon and webserver, the exporter and Prometheus on 127.0.0.1 and stops them by PID); its
exit status is the verdict, and its JSON summary shows that it did the work: faults of several
kinds injected and recovered from, writes acknowledged, merges seen, the backlog drained by the
deployment itself and every alert cleared.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.chaos import BY_HAND
from tests.support.paths import PROJECT_ROOT


def kill_by_hand(parts: Path, name: str, deadline: float) -> None:
    """kill -9 of the part `name` as a person would, by the PID the run lists (again if it just moved)."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            pid = json.loads(parts.read_text())[name]
            if pid:
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.5)
    raise AssertionError(f"no live {name} listed in {parts}")


@pytest.mark.s3
@pytest.mark.timeout(600)
def test_short_chaos_run_loses_nothing_and_the_pipeline_resumes_by_itself(tmp_path: Path) -> None:
    """Beside the run's own faults, the daemon and the exporter are killed by hand, by the PIDs the run
    lists: each is restarted as its unit would, and the run still passes."""
    summary_path = tmp_path / "summary.json"
    workdir = tmp_path / "run"
    with subprocess.Popen(
        [
            sys.executable,
            str(PROJECT_ROOT / "bench" / "chaos.py"),
            "--short",
            "--json",
            str(summary_path),
            "--workdir",
            str(workdir),
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as running:
        deadline = time.monotonic() + 240
        while (
            not (workdir / "parts.json").exists() and running.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        time.sleep(10)
        for name in ("daemon", "exporter"):
            kill_by_hand(workdir / "parts.json", name, deadline)
            time.sleep(10)
        output, _ = running.communicate(timeout=540)
    assert summary_path.exists(), f"chaos crashed:\n{output[-9000:]}"
    summary = json.loads(summary_path.read_text())
    assert running.returncode == 0, f"chaos failed:\n{output[-9000:]}"
    assert summary["violations"] == []
    chaos = summary["chaos"]
    kinds = {fault["kind"] for fault in chaos["faults"]}
    assert len(kinds) >= 4 and all(fault["recovered"] for fault in chaos["faults"]), chaos["faults"]
    by_hand = sorted(fault["kind"] for fault in chaos["faults"] if fault["detail"] == BY_HAND)
    assert by_hand == ["daemon", "exporter"], chaos["faults"]
    assert summary["totals"]["writes_acknowledged"] > 0 and summary["totals"]["writes_lost"] == 0
    assert chaos["merge_commits_seen"] > 0 and chaos["drained_after_s"] is not None
    assert chaos["alerts_cleared_after_s"] is not None
    print(f"chaos --short: {summary['seconds']} s, faults {sorted(kinds)}")
