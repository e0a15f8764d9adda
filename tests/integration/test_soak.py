"""The soak suite's short mode: writers, every service, kills and network faults, nothing acknowledged lost.

Runs `bench/soak.py --short` as a subprocess (it starts its own SeaweedFS and
proxy on 127.0.0.1 and stops them by PID); its exit status is the verdict,
and its JSON summary is checked for the numbers that prove the run did work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import PROJECT_ROOT


@pytest.mark.s3
@pytest.mark.timeout(300)
def test_short_soak_loses_nothing(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    run = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "bench" / "soak.py"), "--short", "--json", str(summary_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    assert summary is not None, f"soak crashed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    totals = summary["totals"]
    assert run.returncode == 0, f"soak failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert summary["violations"] == []
    assert totals["writes_lost"] == 0
    assert totals["writes_acknowledged"] > 0 and totals["merges"] > 0
    assert totals["kills_writers"] + totals["kills_services"] > 0
    assert totals["gc_deleted_generations"] > 0 and totals["quiescent_checks"] > 0
    assert sum(n for k, n in summary["injected_faults"].items() if k != "connections") > 0
    assert summary["seconds"] < 180, f"the short mode took {summary['seconds']} s"
