"""Lance's spurious `Index __lance_mem_wal has no fields` line is gone; Lance's other messages are not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.lance_log import SPURIOUS, lance_log_spec
from tests.support.paths import PROJECT_ROOT


def merge_with_key_index(table: Path, lance_log: str | None) -> subprocess.CompletedProcess[str]:
    """`memwal merge` on a table whose upsert joins through the BTree on the key (Lance logs the line there)."""
    import lance

    write_demo_table(str(table), base_rows=20000, regions=2, rounds=1, rows_per_generation=20)
    lance.dataset(str(table)).create_scalar_index("id", "BTREE")
    env = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    if lance_log is not None:
        env["LANCE_LOG"] = lance_log
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", "merge", str(table)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("lance_log", "shown"),
    [(None, False), ("error", True), (lance_log_spec("info"), False)],
    ids=["memwal-default", "plain-error-level", "info-level-filtered"],
)
def test_a_merge_through_the_key_index_logs_no_spurious_error(
    tmp_path: Path, lance_log: str | None, shown: bool
) -> None:
    done = merge_with_key_index(tmp_path / "t", lance_log)
    assert done.returncode == 0, done.stderr
    assert (SPURIOUS in done.stderr) is shown, done.stderr[-2000:]
    if lance_log is not None and "info" in lance_log:
        # Everything else Lance logs at the level still comes through.
        assert "INFO  lance::" in done.stderr
