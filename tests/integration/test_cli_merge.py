"""`memwal merge` progress: a bar on a terminal (a real pty), one line per region through a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memwal_core.demo import write_demo_table
from tests.support.paths import PROJECT_ROOT


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
    lines = [line for line in proc.stderr.splitlines() if "merged generations" in line]
    assert sorted(line.split(":")[0].split()[-1] for line in lines) == sorted(log.regions)
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
    assert "merged generations" not in terminal, "the bar replaces the per-region lines on a terminal"
    assert "merge of" in proc.stdout
