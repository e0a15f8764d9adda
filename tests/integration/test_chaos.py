"""The chaos run's short mode: the deployment of docs/deploy/ loses nothing under its faults and resumes.

`bench/chaos.py --short` runs as a subprocess (it starts SeaweedFS, PostgreSQL, the code server, the
Dagster daemon and webserver, the exporter and Prometheus on 127.0.0.1 and stops them by PID); its
exit status is the verdict, and its JSON summary shows that it did the work: faults of several
kinds injected and recovered from, writes acknowledged, merges seen, the backlog drained by the
deployment itself and every alert cleared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import PROJECT_ROOT


@pytest.mark.s3
@pytest.mark.timeout(600)
def test_short_chaos_run_loses_nothing_and_the_pipeline_resumes_by_itself(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    run = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "bench" / "chaos.py"), "--short", "--json", str(summary_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert summary_path.exists(), f"chaos crashed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text())
    assert run.returncode == 0, f"chaos failed:\n{run.stdout[-8000:]}\n{run.stderr[-3000:]}"
    assert summary["violations"] == []
    chaos = summary["chaos"]
    kinds = {fault["kind"] for fault in chaos["faults"]}
    assert len(kinds) >= 4 and all(fault["recovered"] for fault in chaos["faults"]), chaos["faults"]
    assert summary["totals"]["writes_acknowledged"] > 0 and summary["totals"]["writes_lost"] == 0
    assert chaos["merge_commits_seen"] > 0 and chaos["drained_after_s"] is not None
    assert chaos["alerts_cleared_after_s"] is not None
    print(f"chaos --short: {summary['seconds']} s, faults {sorted(kinds)}")
