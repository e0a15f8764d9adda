"""`memwal merge` output: a bar on a terminal (a real pty), one progress line per region through a pipe,
each region's figures once, in the report, and counts that agree across regions, batches and totals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memwal_core.demo import write_demo_table
from tests.support.cli import timed_cli
from tests.support.paths import PROJECT_ROOT
from tests.support.service import free_ports


def test_pipe_gets_one_line_per_region(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=100, regions=3, rounds=1, rows_per_generation=10)
    proc = subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "merge", uri, "--json"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if ": merged (batch" in line]
    assert sorted(line.split(":")[0].split()[-1] for line in lines) == sorted(log.regions)
    assert "upserted" not in proc.stderr, "the figures are the report's, not the progress lines'"
    assert len(json.loads(proc.stdout)["regions"]) == 3


def test_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_demo_table(uri, base_rows=100, regions=2, rounds=1, rows_per_generation=10)
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "memwal_core.cli.main", "merge", uri],
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            cwd=PROJECT_ROOT,
            timeout=300,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0
    assert "2/2 regions" in terminal and "[" + "#" * 30 + "]" in terminal
    assert ": merged (batch" not in terminal, "the bar replaces the per-region lines on a terminal"
    assert "merge of" in proc.stdout


def _merge_json(uri: str, *extra: str) -> dict[str, Any]:
    proc, _seconds = timed_cli(["merge", uri, "--json", *extra])
    assert proc.returncode == 0, proc.stderr
    payload: dict[str, Any] = json.loads(proc.stdout)
    return payload


def test_counts_agree_and_rows_deleted_are_the_base_rows_lance_removed(tmp_path: Path) -> None:
    """On the demo table: region entries sum to their batch and to the totals, for each count; a region's
    `rows_deleted` is what Lance itself reports when that region is merged alone, on a copy."""
    together, alone = str(tmp_path / "together"), str(tmp_path / "alone")
    log = write_demo_table(together)
    write_demo_table(alone)
    payload = _merge_json(together)
    counts = ("rows_upserted", "rows_deleted", "tombstones")
    for batch in payload["batches"]:
        entries = [r for r in payload["regions"] if r["batch"] == batch["batch"]]
        assert {c: sum(r[c] for r in entries) for c in counts} == {c: batch[c] for c in counts}
    assert {c: sum(r[c] for r in payload["regions"]) for c in counts} == {c: payload[c] for c in counts}
    assert 0 < payload["rows_deleted"] < payload["tombstones"], "some deleted keys were never in the base"
    by_region = {r["region"]: r for r in payload["regions"]}
    assert sorted(by_region) == sorted(log.regions)
    for region in sorted(by_region):
        single = _merge_json(alone, "--region", region)
        assert single["rows_deleted"] == by_region[region]["rows_deleted"], region
        assert single["tombstones"] == by_region[region]["tombstones"], region


def test_a_spark_server_that_is_down_is_one_line_not_one_per_region(tmp_path: Path) -> None:
    from tests.support.service import free_ports

    uri = str(tmp_path / "demo")
    write_demo_table(uri)
    (port,) = free_ports(1)  # nothing listens there: the Spark Connect server is down
    # Spark named (the demo's small round would otherwise run in process, under the Spark threshold).
    done, _seconds = timed_cli(
        ["merge", uri, "--engine", "spark", "--spark-remote", f"sc://127.0.0.1:{port}"]
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("memwal merge: error:")]
    assert len(errors) == 1 and errors[0].count("regions ") == 1, done.stderr
    assert [line for line in done.stdout.splitlines() if "FAILED" in line] == [
        line for line in done.stdout.splitlines() if line.startswith("  FAILED: regions ")
    ]
    assert done.stdout.count("FAILED") == 1, done.stdout


@pytest.mark.parametrize("engine", [[], ["--engine", "spark"], ["--spark-min-rows", "0"]])
def test_dry_run_never_touches_spark(tmp_path: Path, engine: list[str]) -> None:
    """A dry run plans from the table alone: with MEMWAL_SPARK_REMOTE naming a dead server (a closed
    port) and Spark chosen for the round, it still prints the plan and exits 0, without loading pyspark."""
    uri = str(tmp_path / "t")
    log = write_demo_table(uri, base_rows=100, regions=2, rounds=1, rows_per_generation=10)
    closed = free_ports(1)[0]
    command = (
        "import sys; from memwal_core.cli.main import main; code = main(sys.argv[1:]); "
        "print('pyspark' in sys.modules, file=sys.stderr); sys.exit(code)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", command, "merge", uri, "--dry-run", "--json", *engine],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "MEMWAL_SPARK_REMOTE": f"sc://127.0.0.1:{closed}"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["dry_run"] and result["engine"] == ("local" if not engine else "spark")
    assert sorted(r for b in result["batches"] for r in b["regions"]) == sorted(log.regions)
    assert proc.stderr.splitlines()[-1] == "False", "the dry run loaded pyspark"
