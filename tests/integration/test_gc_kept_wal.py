"""GC's cost does not grow with the WAL it keeps (issue 46), on local disk.

A region keeps a week of WAL entries (the fence retention) and GC deletes them by
position, so it never needs to read them. Its listing once walked the WAL folder
on local disk (the listing's stop before `wal/` let the folder itself through),
and its scan for abandoned uploads stat'ed every entry, on every run: 3 s per plan
for a region of 150,000 entries. The scan now reads names only, and only when a
temp file can be old enough to delete. The directory reads and stats the process
makes are recorded here (passed through to the real calls) to show which ones a
plan makes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, WAL_TEMP_SCANS_FILE, wal_entry_name
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.plan import plan_gc
from memwal_core.services.gc.rules import GcPolicy
from tests.integration.test_gc import NOW, new_table, run_gc, write_generations

DAY = 86_400.0


class FileSystemCalls:
    """Every directory read and stat this process makes from now on, by path (the calls themselves run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.stats: list[str] = []
        for name, record in (("scandir", self.reads), ("listdir", self.reads), ("stat", self.stats)):
            monkeypatch.setattr(os, name, self._recorded(getattr(os, name), record))

    @staticmethod
    def _recorded(call: Callable[..., Any], record: list[str]) -> Callable[..., Any]:
        def recorded(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            record.append(str(path))
            return call(path, *args, **kwargs)

        return recorded

    def reads_in(self, folder: Path) -> list[str]:
        return [p for p in self.reads if p == str(folder) or p.startswith(f"{folder}/")]

    def stats_in(self, folder: Path) -> list[str]:
        return [p for p in self.stats if p.startswith(f"{folder}/")]

    def clear(self) -> None:
        self.reads.clear()
        self.stats.clear()


def region_with_wal(uri: str, extra_entries: int) -> tuple[str, Path]:
    """A region written by Lance's writer, its WAL grown by `extra_entries` copies (hard links) of its first entry."""
    region = write_generations(new_table(uri), None, 2, 1)
    wal_dir = Path(uri) / MEM_WAL_DIR / region / REGION_WAL_DIR
    first = wal_dir / wal_entry_name(1)
    for position in range(1000, 1000 + extra_entries):
        os.link(first, wal_dir / wal_entry_name(position))
    return region, wal_dir


def test_a_plan_never_stats_or_walks_the_wal_entries_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    _region, wal_dir = region_with_wal(uri, 3000)
    calls = FileSystemCalls(monkeypatch)

    dry = run_gc(uri, dry_run=True).to_json()
    assert not dry["failures"] and dry["wal_temp_files_deleted"] == 0
    assert calls.stats_in(wal_dir) == [], "a WAL entry was stat'ed"
    # The folder's names are read once, for abandoned uploads: the listing stops before the folder.
    assert calls.reads_in(wal_dir) == [str(wal_dir)]
    assert not (Path(uri) / WAL_TEMP_SCANS_FILE).exists(), "a dry run records nothing"

    calls.clear()
    assert not run_gc(uri, dry_run=False).to_json()["failures"]
    assert calls.reads_in(wal_dir) == [str(wal_dir)] and calls.stats_in(wal_dir) == []

    calls.clear()
    again = run_gc(uri, dry_run=True).to_json()
    assert not again["failures"]
    assert calls.reads_in(wal_dir) == [], "scanned again before a temp file could be a day old"
    assert calls.stats_in(wal_dir) == []


def test_abandoned_wal_uploads_are_found_by_name_and_scanned_for_when_one_can_be_old_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lance's temp names (`{entry}.tmp.{hex}`, `...#1` while it writes): one two days old goes, one an
    hour old stays, and the folder is not read again until that one is a day old."""
    uri = str(tmp_path / "t")
    region, wal_dir = region_with_wal(uri, 100)
    old = wal_dir / f"{wal_entry_name(2000)}.tmp.{uuid.uuid4().hex}"
    young = wal_dir / f"{wal_entry_name(2001)}.tmp.{uuid.uuid4().hex}#1"
    for file, age in ((old, 2 * DAY), (young, 3600.0)):
        file.write_bytes(b"z")
        os.utime(file, (file.stat().st_mtime - age,) * 2)
    young_due = young.stat().st_mtime + DAY
    policy = GcPolicy(grace_seconds=NOW.grace_seconds, abandoned_after_seconds=DAY)

    done = run_gc(uri, policy, dry_run=False).to_json()
    assert done["wal_temp_files_deleted"] == 1 and not old.exists() and young.exists()

    calls = FileSystemCalls(monkeypatch)
    with MemWalTable.open(uri) as table:
        (soon,) = plan_gc(table, policy).regions
        assert soon.wal_temp_delete == () and calls.reads_in(wal_dir) == []
        (due,) = plan_gc(table, policy, now=young_due + 1).regions
    assert due.wal_temp_delete == (f"{MEM_WAL_DIR}/{region}/{REGION_WAL_DIR}/{young.name}",)
    # Read by name, and only the temp file stat'ed.
    assert calls.reads_in(wal_dir) == [str(wal_dir)] and calls.stats_in(wal_dir) == [str(young)]
