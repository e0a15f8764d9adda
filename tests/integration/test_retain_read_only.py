"""`memwal retain` on a table it may not change fails, instead of reporting success (issue 28, item 7).

Lance 14's `cleanup_old_versions` ignores a refused delete: on a read-only
table it removed nothing and memwal printed "removed 0 version(s)", exit 0.
The table is made read-only with file permissions; as root (which permissions
do not stop) the command runs as the unprivileged user `nobody` instead.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.storage.options import StorageOptions
from tests.support.paths import PROJECT_ROOT

NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can read (pytest's own temp folders are private to us)."""
    path = Path(tempfile.mkdtemp(prefix="memwal-retain-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for root, dirs, _files in os.walk(path):
            for name in dirs:
                (Path(root) / name).chmod(0o755)
        shutil.rmtree(path)


def _read_only(root: Path) -> None:
    for folder, dirs, files in os.walk(root):
        for name in files:
            (Path(folder) / name).chmod(0o444)
        for name in dirs:
            (Path(folder) / name).chmod(0o555)
    root.chmod(0o555)


def retain_as_reader(table: Path) -> subprocess.CompletedProcess[str]:
    """`memwal retain --older-than 0s --force --json`, as a user that can only read `table`."""
    # util-linux's setpriv: Python's own `user=` cannot exec this interpreter, which lives under /root.
    as_nobody = (
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    )
    command = ["retain", str(table), "--older-than", "0s", "--force", "--json"]
    return subprocess.run(
        [*as_nobody, sys.executable, "-m", "memwal_core.cli.main", *command],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOME": str(table.parent)},
    )


def test_retain_on_a_read_only_table_fails_naming_the_refusal(shared_dir: Path) -> None:
    table = shared_dir / "t"
    write_demo_table(str(table), StorageOptions(), base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    versions = sorted(os.listdir(table / "_versions"))
    _read_only(table)
    assert not os.stat(table).st_mode & stat.S_IWUSR

    done = retain_as_reader(table)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "were due for removal but remain: the storage refuses changes" in line, line
    assert "Permission denied" in line
    assert json.loads(done.stdout)["failures"][0]["exit_code"] == 1
    assert sorted(os.listdir(table / "_versions")) == versions


def test_retain_on_a_writable_table_still_removes(shared_dir: Path) -> None:
    table = shared_dir / "t"
    write_demo_table(str(table), StorageOptions(), base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    for folder, dirs, files in os.walk(table):  # writable by the user the command runs as
        for name in [*dirs, *files]:
            (Path(folder) / name).chmod(0o777)
    table.chmod(0o777)
    done = retain_as_reader(table)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["versions_removed"] >= 1
