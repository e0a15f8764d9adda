"""The soak suite: its short mode loses nothing, and its audit catches a lost acknowledged write.

Each test runs `bench/soak.py` as a subprocess (it starts its own SeaweedFS
and proxy on 127.0.0.1 and stops them by PID); its exit status is the
verdict, and its JSON summary is checked for the numbers that prove the run
did the work: kills (also inside a two-step merge commit), writers stalled
and woken, merges in both commit forms and on the Spark engine, GC, injected
faults.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import PROJECT_ROOT

# How long a soak may run before the test stops it (the tests' own timeout is 300 s).
SOAK_SECONDS = 270.0


def run_soak(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the soak with `args`; its process and its JSON summary (the test fails if there is none).

    Its output goes to a file, so a soak stopped at SOAK_SECONDS still shows how far it got; it is
    stopped with SIGINT, so its teardown stops its children (each in a session of its own) and its
    servers, which a SIGKILL would leave running.
    """
    summary_path = tmp_path / "summary.json"
    log_path = tmp_path / "soak.log"
    command = [sys.executable, str(PROJECT_ROOT / "bench" / "soak.py"), *args, "--json", str(summary_path)]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            process.wait(SOAK_SECONDS)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(25)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            pytest.fail(
                f"the soak ran past {SOAK_SECONDS:g} s; its output ends:\n{log_path.read_text()[-6000:]}"
            )
    output = log_path.read_text()
    run = subprocess.CompletedProcess(command, process.returncode, stdout=output, stderr="")
    assert summary_path.exists(), f"soak crashed:\n{output[-9000:]}"
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return run, summary


@pytest.mark.s3
@pytest.mark.timeout(300)
def test_short_soak_loses_nothing(tmp_path: Path) -> None:
    run, summary = run_soak(tmp_path, "--short")
    totals = summary["totals"]
    assert run.returncode == 0, f"soak failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert summary["violations"] == []
    assert totals["writes_lost"] == 0
    assert totals["writes_acknowledged"] > 0 and totals["merges"] > 0
    assert totals["kills_writers"] + totals["kills_services"] > 0
    assert totals["kills_in_two_step_commit"] > 0 and totals["checks_after_two_step_kill"] > 0
    forms = totals["merge_batches_by_engine_and_form"]
    assert forms.get("local/single", 0) > 0 and forms.get("local/two-step", 0) > 0, forms
    assert totals["spark_merge_rounds"] > 0
    assert totals["gc_deleted_generations"] > 0 and totals["quiescent_checks"] > 0
    # Writers pause on a clean network: no quiescent check is skipped for a pause that took too long.
    assert not [note for note in summary["notes"] if "did not pause in time" in note], summary["notes"]
    # Writers were stopped, held across merges and GCs, and woken to try puts (each refused or read).
    assert totals["writer_stalls"] > 0 and totals["stale_writes"] > 0
    assert sum(n for k, n in summary["injected_faults"].items() if k != "connections") > 0
    assert summary["seconds"] < 180, f"the short mode took {summary['seconds']} s"


@pytest.mark.azure
@pytest.mark.timeout(300)
def test_short_soak_on_azure_loses_nothing(tmp_path: Path) -> None:
    """The short mode's table on Azurite alone (Spark's merge on Azure has its own test)."""
    run, summary = run_soak(tmp_path, "--short", "--azure", "--skip-s3", "--skip-local", "--spark-every", "0")
    totals = summary["totals"]
    assert run.returncode == 0, f"soak failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert list(summary["tables"]) == ["azure"] and summary["violations"] == []
    assert totals["writes_lost"] == 0 and totals["writes_acknowledged"] > 0 and totals["merges"] > 0
    assert totals["kills_writers"] + totals["kills_services"] > 0
    assert totals["gc_deleted_generations"] > 0 and totals["quiescent_checks"] > 0
    assert totals["writer_stalls"] > 0 and totals["stale_writes"] > 0
    assert sum(n for k, n in summary["injected_faults"].items() if k != "connections") > 0


@pytest.mark.timeout(300)
def test_the_audit_catches_a_lost_acknowledged_write(tmp_path: Path) -> None:
    """Writer 0 logs one put as acknowledged without writing it: the run must fail, naming that key."""
    run, summary = run_soak(
        tmp_path,
        "--minutes",
        "0.3",
        "--skip-s3",
        "--regions",
        "4",
        "--spark-every",
        "0",
        "--sabotage-at",
        "5",
    )
    assert run.returncode == 1, f"the soak missed the lost write:\n{run.stdout[-4000:]}"
    assert summary["totals"]["writes_lost"] == 1
    (violation,) = summary["violations"]
    detail = json.loads(violation["detail"])
    assert violation["kind"] == "base_differs" and violation["region"] is not None
    assert detail["writer"] == 0 and detail["actual"] is None
    assert detail["expected"].startswith("w0s") and int(detail["expected"][3:]) >= 5
