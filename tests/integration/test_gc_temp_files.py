"""GC removes the temp files a failed lease write left (issue 28, item 11).

A full disk failed lease writes after their temp file was created, leaving
0-byte `.NAME.HEX.tmp` files under `_memwal_leases/` that nothing removed (the
local store hides temp files from listings, so GC never saw them). A failed
write now removes its own temp file, and GC deletes any left once they are
older than the policy's abandoned-file age, as it does for staged files; it
keeps younger ones (a write in flight) and files that are not the store's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.storage.options import StorageOptions
from tests.support.paths import PROJECT_ROOT


def test_gc_deletes_abandoned_lease_temp_files_only(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_demo_table(str(path), StorageOptions(), base_rows=50, regions=1, rounds=1, rows_per_generation=10)
    leases = path / "_memwal_leases" / "merge"
    leases.mkdir(parents=True)
    old = time.time() - 7200
    abandoned = [leases / f".{n:020d}.json.{uuid.uuid4().hex}.tmp" for n in (1, 2)]
    in_flight = leases / f".{3:020d}.json.{uuid.uuid4().hex}.tmp"
    foreign = leases / "notes.tmp"
    for file in [*abandoned, in_flight, foreign]:
        file.write_bytes(b"")
    for file in [*abandoned, foreign]:
        os.utime(file, (old, old))

    with MemWalTable.open(str(path)) as table:
        planned = gc(table, dry_run=True, policy=GcPolicy(abandoned_after_seconds=3600))
        assert planned.to_json()["staging_files_deleted"] == 2
        assert all(file.exists() for file in abandoned), "a dry run deletes nothing"
        gc(table, dry_run=False, policy=GcPolicy(abandoned_after_seconds=3600))
    assert not any(file.exists() for file in abandoned)
    assert in_flight.exists() and foreign.exists()


def test_a_failed_write_removes_its_temp_file(tmp_path: Path) -> None:
    """A disk that fills mid-write, as a file size limit makes it (EFBIG instead of ENOSPC) in a child process."""
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from memwal_core.errors import StorageError\n"
        "from memwal_core.storage.local import LocalStore\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))\n"
        "try:\n"
        "    LocalStore(Path(sys.argv[1])).write('leases/1.json', b'x' * 4096)\n"
        "except StorageError as exc:\n"
        "    print(exc)\n"
    )
    (tmp_path / "leases").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT_ROOT,
    )
    assert "put of" in done.stdout and "failed" in done.stdout, done.stdout + done.stderr
    assert list((tmp_path / "leases").iterdir()) == []
