"""Concurrent mergers and crashed mergers: no error escapes, progress never goes down, no row lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from tests.support.paths import PROJECT_ROOT
from tests.support.tables import assert_progress_never_decreases, lease_records, progress_history


def merged_rows(uri: str) -> dict[int, tuple[str, float]]:
    return {r["id"]: (r["name"], r["score"]) for r in MemWalTable(uri).dataset().to_table().to_pylist()}


def test_two_mergers_at_the_same_moment(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=400, regions=3, rounds=10, rows_per_generation=20)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.merger_proc", uri, "20", str(seed)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        rounds = [json.loads(line) for line in out.splitlines()]
        assert len(rounds) == 20
        for r in rounds:
            assert r["failures"] == [], r["failures"]
    replans = sum(
        reg["replans"]
        for out, _ in outputs
        for line in out.splitlines()
        for reg in json.loads(line)["regions"]
    )
    with MemWalTable.open(uri) as table:
        merge(table)
        assert status(table).pending_total == 0
    assert_progress_never_decreases(progress_history(uri))
    assert merged_rows(uri) == log.model()
    print(f"stale re-plans observed: {replans}")


def test_killed_merger_converges_on_rerun(tmp_path: Path) -> None:
    """kill -9 at random moments after a merger took its first region (reading, collapsing, committing)."""
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=4000, regions=2, rounds=8, rows_per_generation=1000)
    rng = random.Random(11)
    kills = 0
    for _ in range(8):
        started_work = lease_records(uri)
        proc = subprocess.Popen(
            [sys.executable, "-m", "memwal_core.cli.main", "merge", uri, "--max-generations", "1"],
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while lease_records(uri) == started_work and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        with MemWalTable.open(uri) as table:
            status(table)  # the table stays readable after every kill
    print(f"merger processes killed: {kills} of 8")
    assert kills >= 1
    with MemWalTable.open(uri) as table:
        result = merge(table)
        assert not result.failures
        assert status(table).pending_total == 0
    assert_progress_never_decreases(progress_history(uri))
    assert merged_rows(uri) == log.model()
