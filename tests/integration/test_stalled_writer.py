"""A writer stopped for as long as it takes, then woken: nothing it is told was written may be lost.

Writer A (a process: Lance's native writer or `MemWalWriter`) claims a
region, makes acknowledged puts and is stopped with SIGSTOP. Writer B runs
three sessions on the region (each claim fences the writer before it, with a
sentinel at its next WAL slot), the pipeline merges and collects, and A is
woken and tries more puts. Every put A was told succeeded must be in the
MemWAL-aware read and, once merged, in the base table; a put that failed may
be in neither. GC runs at grace 0 (the WAL's covered entries old enough at
once) and, on local disk, at its default grace with the files aged two hours;
the fence retention (a week) keeps the WAL entries A may still collide with.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR
from memwal_core.model.claim import MAX_UNCHECKED_SECONDS
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.service import merge
from memwal_core.services.reader import lsm_scanner, plan_read
from memwal_core.services.writer import MemWalWriter
from tests.support.cli import option_flags, run_cli
from tests.support.paths import PROJECT_ROOT
from tests.support.stalled_writer_proc import FIRST_KEYS, LATER_KEYS, OPTIONS_ENV, SCHEMA

SESSIONS = 3
PUTS_PER_SESSION = 8


class StalledWriter:
    """Writer A: its process, stopped and woken from here."""

    def __init__(self, kind: str, uri: str, region: str, options: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.stalled_writer_proc", kind, uri, region],
            cwd=PROJECT_ROOT,
            env={**os.environ, OPTIONS_ENV: json.dumps(options)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "ready", (
            f"writer A did not start: {line!r} {self.process.stderr.read() if self.process.stderr else ''}"
        )

    def stop(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def wake(self) -> tuple[set[int], set[int], str]:
        """Resume it and let it try its later puts: the keys acknowledged, those refused, how it closed."""
        os.kill(self.process.pid, signal.SIGCONT)
        out, err = self.process.communicate("go\n", timeout=120)
        acked, failed = set(), set()
        for line in out.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("ack", "fail"):
                (acked if word == "ack" else failed).add(int(rest.split(" ")[0]))
        assert acked | failed == set(LATER_KEYS), f"writer A said {out!r}; stderr {err[-2000:]}"
        return acked, failed, out.splitlines()[-1]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def new_table(uri: str, options: dict[str, str]) -> str:
    """A table with manual regions, and the region writer A will claim."""
    base = pa.table({"id": pa.array([-1], pa.int64()), "v": ["base"]}, schema=SCHEMA)
    lance.write_dataset(base, uri, storage_options=options or None).initialize_mem_wal()
    return str(uuid.uuid4())


def writer_b_sessions(uri: str, options: dict[str, str], region: str) -> set[int]:
    """Three sessions of writer B on the region: each claims it, puts, and closes (flushing)."""
    keys: set[int] = set()
    for session in range(SESSIONS):
        with MemWalWriter(uri, options or None, region=region) as writer:
            for i in range(PUTS_PER_SESSION):
                key = 1000 + session * 100 + i
                writer.put(pa.table({"id": [key], "v": [f"b{key}"]}, schema=SCHEMA))
                keys.add(key)
    return keys


def age_wal(uri: str, region: str, seconds: float) -> None:
    """Make every WAL entry of the region look `seconds` old (local disk)."""
    then = time.time() - seconds
    for path in (Path(uri) / MEM_WAL_DIR / region / REGION_WAL_DIR).iterdir():
        os.utime(path, (then, then))


def collect(uri: str, options: dict[str, str], region: str, how: str) -> dict[str, int]:
    """Merge, then GC: at grace 0, or at the default grace (the `memwal` command) after aging the WAL."""
    with MemWalTable.open(uri, options or None) as table:
        merge(table)
        if how == "grace-0":
            return dict(
                gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0)).to_json()["wal_entries"]["kept"]
            )
    age_wal(uri, region, 2 * 3600)
    done = run_cli("gc", uri, "--json", *option_flags(options))
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout)["wal_entries"]["kept"])


def table_keys(uri: str, options: dict[str, str]) -> tuple[dict[int, str], dict[int, str]]:
    """The MemWAL-aware read and the base table, as key -> value."""
    with MemWalTable.open(uri, options or None) as table:
        lsm = lsm_scanner(table, plan_read(table)).to_table()
        base = table.dataset().to_table(columns=["id", "v"])
    as_dict = lambda t: dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))  # noqa: E731
    return as_dict(lsm), as_dict(base)


@pytest.mark.parametrize("kind", ["native", "memwal"])
@pytest.mark.parametrize(
    ("store", "how"),
    # S3 and Azure set an object's time themselves, so the aged files are on local disk.
    [("local", "grace-0"), ("local", "default-grace-aged"), ("s3", "grace-0"), ("azure", "grace-0")],
)
def test_a_woken_writer_is_refused_or_read(
    tmp_path: Path, store: str, how: str, kind: str, request: pytest.FixtureRequest
) -> None:
    if store != "local":
        scheme, server = {"s3": ("s3", "seaweed"), "azure": ("az", "azurite")}[store]
        root, options = (
            f"{scheme}://memwal-test/stalled-{uuid.uuid4().hex}",
            request.getfixturevalue(server).storage_options(),
        )
    else:
        root, options = str(tmp_path), {}
    uri = f"{root}/t"
    region = new_table(uri, options)
    writer_a = StalledWriter(kind, uri, region, options)
    try:
        writer_a.stop()
        b_keys = writer_b_sessions(uri, options, region)
        kept = collect(uri, options, region, how)
        # Every covered WAL entry is younger than the fence retention: GC keeps them and says so.
        assert kept.get("fence_retention", 0) >= SESSIONS * PUTS_PER_SESSION, kept
        acked, failed, closing = writer_a.wake()
    finally:
        writer_a.kill()
    # Anything A left in the WAL is replayed by the next claim, and merged.
    with MemWalWriter(uri, options or None, region=region) as recovery:
        recovery.claim()
    lsm_before_merge, _ = table_keys(uri, options)
    with MemWalTable.open(uri, options or None) as table:
        merge(table)
    lsm, base = table_keys(uri, options)
    must = {-1, *FIRST_KEYS, *b_keys, *acked}
    for name, found in (
        ("MemWAL-aware read", lsm_before_merge),
        ("MemWAL-aware read after merge", lsm),
        ("base", base),
    ):
        assert must <= set(found), f"{name} lost acknowledged keys {sorted(must - set(found))}"
        assert set(found) <= must | failed, (
            f"{name} holds keys never written: {sorted(set(found) - must - failed)}"
        )
    # A was fenced: each later put is refused (by Lance's collision with the fence, or memwal's check).
    assert not acked and failed == set(LATER_KEYS), (acked, failed, closing)


def test_memwal_writer_refuses_even_when_the_fence_was_deleted(tmp_path: Path) -> None:
    """A GC that freed A's next slot (the rule before fence slots) cannot make `MemWalWriter` acknowledge."""
    uri = str(tmp_path / "t")
    region = new_table(uri, {})
    writer_a = StalledWriter("memwal", uri, region, {})
    try:
        writer_a.stop()
        writer_b_sessions(uri, {}, region)
        with MemWalTable.open(uri) as table:
            covered = table.read_region(region)
            assert covered is not None
        wal = Path(uri) / MEM_WAL_DIR / region / REGION_WAL_DIR
        for path in wal.iterdir():  # every covered entry but the newest, sentinels included
            if int(path.name[:64][::-1], 2) < covered.replay_after_wal_entry_position:
                path.unlink()
        # A stall GC could collect under is far longer than the window a check covers (a second).
        time.sleep(MAX_UNCHECKED_SECONDS)
        acked, failed, _closing = writer_a.wake()
    finally:
        writer_a.kill()
    assert not acked and failed == set(LATER_KEYS)
