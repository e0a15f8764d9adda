"""GC and leases on a host whose clock is off the store's (issue 47), on local disk and SeaweedFS.

The process under test runs under libfaketime (`tests/support/skewed.py`), which shifts every clock
it reads, Python's and Lance's and obstore's alike, while the store keeps stamping real times. GC
2 hours ahead once deleted directories inside their grace period, 8 days ahead every WAL entry kept
for the fence retention; a merger 10 minutes off took a live holder's lease, or wrote one that
everyone else read as expired. Now each refuses in one line and changes nothing. SeaweedFS, like
S3, itself refuses requests signed more than 15 minutes off: memwal says so in one line too.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

from memwal_core.format.naming import LEASE_DIR
from memwal_core.model.clock import MAX_CLOCK_SKEW_SECONDS
from memwal_core.model.lease import Lease
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.merge.service import merge
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store
from tests.integration.test_gc import new_table, write_generations
from tests.support.cli import option_flags
from tests.support.skewed import skewed_cli, skewed_python

HOUR = GcPolicy(grace_seconds=3600)
# memwal's own records, which a refused run may still write (its outcome, the clock it read).
OWN_RECORDS = ("_memwal_hints/", "_memwal_outcomes/", "_memwal_rules/")


def stored(store: ObjectStore) -> set[str]:
    """Every object of the table but memwal's own records."""
    return {f.path for f in store.list_files("", recursive=True) if not f.path.startswith(OWN_RECORDS)}


def test_the_processes_clock_is_shifted_and_the_stores_is_not(tmp_path: Path) -> None:
    written = tmp_path / "f"
    done = skewed_python(
        "+2h", "-c", f"import time, pathlib; pathlib.Path({str(written)!r}).touch(); print(time.time())"
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) - written.stat().st_mtime > 7000  # the kernel stamped the real time


def skew_refused(done: Any) -> str:
    """The one line a refused run printed."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return str(lines[0])


@pytest.mark.parametrize(
    ("store_uri", "offset"),
    [("local", "+2h"), ("local", "+8d"), ("local", "-10m"), ("s3", "+10m"), ("s3", "+2h")],
    indirect=["store_uri"],
)
def test_gc_on_a_host_whose_clock_is_off_refuses_and_deletes_nothing(
    store_uri: tuple[str, dict[str, str]], offset: str
) -> None:
    uri, options = store_uri
    model = new_table(uri, options or None)
    write_generations(model, None, 3, 1)
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        merge(table)
        lance.dataset(uri, storage_options=options or None).cleanup_old_versions(older_than=timedelta(0))
        # Pruned from the manifest now; their directories stay for the grace period, the WAL for a week.
        assert len(gc(table, dry_run=False, policy=HOUR).to_json()["pruned"]) == 3
        before = stored(table.store)

    line = skew_refused(skewed_cli(offset, "gc", uri, *option_flags(options), "--grace-seconds", "3600"))
    if options and offset == "+2h":  # beyond the request-signing window: the store refused first
        assert line.startswith("memwal gc: error: ") and "request-signing window" in line, line
    else:
        assert line.startswith("memwal gc: error: this host's clock is "), line
        assert f"more than the {MAX_CLOCK_SKEW_SECONDS:g} s memwal allows" in line, line
    assert "set this host's clock" in line
    with MemWalTable.open(uri, StorageOptions(options)) as table:
        assert stored(table.store) == before, "nothing deleted"
        # The same run on a host whose clock is right keeps them too (the grace period runs).
        assert gc(table, dry_run=False, policy=HOUR).to_json()["deleted"] == []
        assert stored(table.store) == before
    model.assert_merged()


TAKER = """
import json, sys
from memwal_core.errors import MemwalError
from memwal_core.model.lease import Lease
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store

store = open_store(sys.argv[1], StorageOptions(json.loads(sys.argv[2])))
try:
    print(json.dumps({"held": Lease(store, "merge-r", ttl=300).try_acquire()}))
except MemwalError as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""


@pytest.mark.parametrize("offset", ["+10m", "-10m"])
def test_a_lease_taker_whose_clock_is_off_refuses_and_writes_nothing(
    store_uri: tuple[str, dict[str, str]], offset: str
) -> None:
    """10 minutes ahead, a live holder's record (5 minutes' TTL) looks expired; 10 minutes behind, the
    taker's own record would look expired to every other host while it holds the lease."""
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    holder = Lease(store, "merge-r", ttl=300).acquire()
    if offset.startswith("-"):
        holder.release()  # a free lease
    records = {f.path for f in store.list_files(f"{LEASE_DIR}/merge-r")}

    done = skewed_python(offset, "-c", TAKER, uri, json.dumps(options))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    side = "behind" if offset.startswith("-") else "ahead of"
    assert re.match(
        f"ClockSkewError: this host's clock is (599|600|601) s {side} the store's", answer.get("error", "")
    ), answer
    assert {f.path for f in store.list_files(f"{LEASE_DIR}/merge-r")} == records, "no record written"
    if holder.held is not None:
        holder.renew()  # the live holder still holds it
        holder.release()
    assert Lease(store, "merge-r", ttl=300).try_acquire(), "free for a taker whose clock is right"
