"""`memwal retain` on a table it may not change fails, instead of reporting success (issue 28, item 7).

Lance 14's `cleanup_old_versions` ignores a refused delete: on a read-only
table it removed nothing and memwal printed "removed 0 version(s)", exit 0.
The table is made read-only with file permissions; as root (whom permissions
do not stop) the command runs without root's capabilities (util-linux's
setpriv): permissions stop it, and it still reads the checkout and its
interpreter however private the folder they were cloned into.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from memwal_core.demo import write_demo_table
from memwal_core.storage.options import StorageOptions
from tests.support.paths import PROJECT_ROOT


def _read_only(root: Path) -> None:
    for folder, dirs, files in os.walk(root):
        for name in files:
            (Path(folder) / name).chmod(0o444)
        for name in dirs:
            (Path(folder) / name).chmod(0o555)
    root.chmod(0o555)


def _writable(root: Path) -> None:
    for folder, dirs, _files in os.walk(root):
        for name in dirs:
            (Path(folder) / name).chmod(0o755)
    root.chmod(0o755)


def retain_as_reader(table: Path) -> subprocess.CompletedProcess[str]:
    """`memwal retain --older-than 0s --force --json`, by a process file permissions apply to."""
    without_privilege = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []
    command = ["retain", str(table), "--older-than", "0s", "--force", "--json"]
    return subprocess.run(
        [*without_privilege, sys.executable, "-m", "memwal_core.cli.main", *command],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_retain_on_a_read_only_table_fails_naming_the_refusal(tmp_path: Path) -> None:
    table = tmp_path / "t"
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
    _writable(table)  # so that pytest can clean its folder up


def test_retain_on_a_writable_table_still_removes(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_demo_table(str(table), StorageOptions(), base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    done = retain_as_reader(table)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["versions_removed"] >= 1
