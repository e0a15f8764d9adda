"""Leases in table storage: one holder at a time, expiry takeover, loss detection (local and S3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memwal_core.errors import CorruptMetadataError, LeaseBusyError, LeaseLostError
from memwal_core.format.naming import LEASE_DIR
from memwal_core.model import lease as lease_module
from memwal_core.model.lease import KEEP_RECORDS, PRUNE_BATCH, RELISTS, Lease
from memwal_core.storage.local import LocalStore
from memwal_core.storage.object_store import ObjectInfo, by_kind
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store


def test_one_holder_at_a_time(store_uri: tuple[str, dict[str, str]]) -> None:
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    leases = [Lease(store, "merge-r", ttl=60) for _ in range(12)]
    with ThreadPoolExecutor(12) as pool:
        won = list(pool.map(lambda lease: lease.try_acquire(), leases))
    assert won.count(True) == 1
    holder = leases[won.index(True)]
    other = leases[(won.index(True) + 1) % 12]
    with pytest.raises(LeaseBusyError, match="merge-r"):
        other.acquire(wait=0.2, poll=0.05)
    holder.release()
    assert other.try_acquire()
    other.release()


def test_expired_lease_is_taken_over_and_the_old_holder_learns_it(
    store_uri: tuple[str, dict[str, str]],
) -> None:
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    stalled = Lease(store, "merge-x", ttl=0.3).acquire()
    time.sleep(0.5)
    successor = Lease(store, "merge-x", ttl=60).acquire()
    with pytest.raises(LeaseLostError):
        stalled.renew()
    with pytest.raises(LeaseLostError):
        stalled.ensure()
    latest = successor.latest()
    assert latest is not None and latest.owner == successor.owner
    successor.ensure()
    successor.release()


def test_renewal_keeps_the_lease(tmp_path: object) -> None:
    store = open_store(str(tmp_path), StorageOptions())
    lease = Lease(store, "merge-y", ttl=0.6).acquire()
    for _ in range(4):
        time.sleep(0.25)
        lease.ensure()
    assert not Lease(store, "merge-y", ttl=60).try_acquire()
    lease.release()
    assert Lease(store, "merge-y", ttl=60).try_acquire()


HOLD = """
import sys, time
from memwal_core.model.lease import Lease
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store
Lease(open_store(sys.argv[1], StorageOptions()), "merge-z", ttl=3600).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_lease_of_a_killed_local_holder_is_free_at_once(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), StorageOptions())
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    assert not Lease(store, "merge-z", ttl=60).try_acquire(), "its holder lives"
    holder.kill()
    holder.wait()
    assert Lease(store, "merge-z", ttl=60).try_acquire(), "its holder was killed: free at once"
    remote = "another-host:1:cafe"
    store.put_if_not_exists(
        "_memwal_leases/merge-w/00000000000000000001.json",
        json.dumps({"owner": remote, "expires_at": time.time() + 3600}).encode(),
    )
    assert not Lease(store, "merge-w", ttl=60).try_acquire()


def test_old_records_are_pruned_and_a_quiet_lease_deletes_nothing(
    store_uri: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, options = store_uri
    store = open_store(uri, StorageOptions(options))
    for _ in range(KEEP_RECORDS + 10):
        with Lease(store, "merge-p", ttl=60):
            pass
    # Records younger than PRUNE_AGE all stay: only a writer paused that long could write over a pruned one.
    assert len(store.list_files(f"{LEASE_DIR}/merge-p")) == 2 * (KEEP_RECORDS + 10)
    assert by_kind(store.stats.snapshot())["DELETE"] == 0
    monkeypatch.setattr(lease_module, "PRUNE_AGE", 0.0)
    with Lease(store, "merge-p", ttl=60):
        pass
    records = store.list_files(f"{LEASE_DIR}/merge-p")
    assert KEEP_RECORDS - 1 <= len(records) <= KEEP_RECORDS + 1, len(records)
    deletes = by_kind(store.stats.snapshot())["DELETE"]
    assert deletes >= 1
    with Lease(store, "merge-p", ttl=60):
        pass
    assert by_kind(store.stats.snapshot())["DELETE"] == deletes, "fewer than a batch's worth waits"


@pytest.mark.parametrize(
    "record",
    [
        b"\xff\xfe garbled \x00",
        bytes(64),
        b"",
        b'{"owner": "h:1:a", "expires_at": 1',
        b"[1, 2]",
        b'{"owner": 5, "expires_at": 1}',
        b'{"owner": null, "expires_at": "soon"}',
        b'{"owner": "h:1:a", "expires_at": true}',
        b'{"owner": "h:1:a", "expires_at": Infinity}',
        b'{"owner": "h:1:a", "expires_at": NaN}',
        b'{"owner": "h:1:a", "expires_at": 1e300}',
        b'{"owner": "h:1:a", "expires_at": 1, "done_at": "5"}',
        b'{"owner": "h:1:a", "expires_at": 1, "done_at": true}',
    ],
    ids=[
        "garbled",
        "zeroed",
        "empty",
        "torn",
        "not-an-object",
        "owner-not-a-string",
        "expiry-not-a-number",
        "expiry-a-boolean",
        "expiry-infinite",
        "expiry-nan",
        "expiry-centuries-away",
        "done-at-a-string",
        "done-at-a-boolean",
    ],
)
def test_an_unreadable_record_is_held_for_one_ttl_from_its_write_then_taken_over_by_one(
    tmp_path: Path, record: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Never free at once (two mergers on one region), never held forever (a table stuck on one object)."""
    store = open_store(str(tmp_path), StorageOptions())
    with Lease(store, "merge-u", ttl=60):
        pass
    damaged = max((tmp_path / LEASE_DIR / "merge-u").iterdir())
    damaged.write_bytes(record)
    for _ in range(2):  # a waiting acquire does not wait for it either: the damage is reported at once
        with pytest.raises(
            CorruptMetadataError, match=f"lease record {damaged} is unreadable; .* held until"
        ):
            Lease(store, "merge-u", ttl=60).acquire(wait=0.3, poll=0.05)
    assert max((tmp_path / LEASE_DIR / "merge-u").iterdir()) == damaged, "nothing written over the damage"
    written = time.time() - 61
    os.utime(damaged, (written, written))
    takers = [Lease(store, "merge-u", ttl=60) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda lease: lease.try_acquire(), takers))
    assert won.count(True) == 1, "exactly one taker wins the damaged record"
    winner = takers[won.index(True)]
    assert winner.held is not None and winner.held.seq == int(damaged.stem) + 1
    assert f"lease record {damaged} was unreadable" in caplog.text
    assert not Lease(store, "merge-u", ttl=60).try_acquire(), "the taker holds it like any lease"
    winner.release()


def test_a_record_expiring_within_a_day_of_its_write_is_a_record(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), StorageOptions())
    store.put_if_not_exists(
        f"{LEASE_DIR}/merge-l/00000000000000000001.json",
        json.dumps({"owner": "another-host:1:cafe", "expires_at": time.time() + 20 * 3600}).encode(),
    )
    assert not Lease(store, "merge-l", ttl=60).try_acquire(), "a long lease of a live holder is kept"


def test_a_holder_done_by_the_progress_read_frees_its_lease(tmp_path: Path) -> None:
    """A merge names the generation it merges up to; once a taker has read progress there, the lease
    is free without a release, and not before; a holder that named nothing keeps it whatever the
    progress."""
    store = open_store(str(tmp_path), StorageOptions())
    holder = Lease(store, "merge-d", ttl=60, done_at=5, progress=3).acquire()
    assert holder.held is not None and holder.held.done_at == 5
    assert not Lease(store, "merge-d", ttl=60, progress=4).try_acquire(), "its work has not landed"
    assert not Lease(store, "merge-d", ttl=60).try_acquire(), "a taker that read nothing waits"
    taker = Lease(store, "merge-d", ttl=60, done_at=9, progress=5)
    assert taker.try_acquire(), "progress reached the holder's target"
    with pytest.raises(LeaseLostError):
        holder.renew()
    holder.release()  # it knows it lost the lease: its give-back writes nothing
    assert taker.latest() == taker.held and taker.held is not None and taker.held.done_at == 9

    Lease(store, "merge-e", ttl=60).acquire()
    assert not Lease(store, "merge-e", ttl=60, progress=1_000).try_acquire()


class _HolderRunsAheadAfterEachList(LocalStore):
    """A local store on which, right after each listing, another holder takes the lease KEEP_RECORDS +
    PRUNE_BATCH times (pruning what the listing saw): a reader stalled between its LIST and its GET."""

    def __init__(self, root: Path, holder: Lease, listings: int) -> None:
        super().__init__(root)
        self.holder = holder
        self.listings = listings

    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None
    ) -> list[ObjectInfo]:
        listed = super().list_files(path, recursive=recursive, before=before)
        if self.listings > 0:
            self.listings -= 1
            for _ in range(KEEP_RECORDS + PRUNE_BATCH):
                assert self.holder.try_acquire()
        return listed


@pytest.mark.parametrize("listings", [1, 2, 10])
def test_a_newest_record_pruned_before_it_is_read_is_not_an_error(
    tmp_path: Path, listings: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest record a LIST saw may be pruned before it is read, by a holder taking the lease again
    and again: the lease is then held (busy), never "does not exist", and the record is read again."""
    monkeypatch.setattr(lease_module, "PRUNE_AGE", 0.0)  # the holder prunes as it goes
    holder = Lease(open_store(str(tmp_path), StorageOptions()), "details", ttl=300).acquire()
    store = _HolderRunsAheadAfterEachList(tmp_path, holder, listings)
    rival = Lease(store, "details", ttl=300)
    assert not rival.try_acquire()
    store.listings = listings
    if listings < RELISTS:  # the records are listed again, and the holder's newest is read
        latest = rival.latest()
        assert latest is not None and latest.owner == holder.owner
    else:
        with pytest.raises(LeaseBusyError, match="faster than it can be read"):
            rival.latest()
    assert holder.try_acquire(), "the holder still holds its lease"


class _PausedAfterReading(LocalStore):
    """A store whose reader pauses after reading a lease record, while another holder takes the lease
    KEEP_RECORDS + PRUNE_BATCH times, pausing first so that the numbers it writes become old enough to
    prune."""

    def __init__(self, root: Path, holder: Lease, pause: float) -> None:
        super().__init__(root)
        self.holder, self.pause, self.paused = holder, pause, False
        self.lists_cheaply = False  # as on an object store: only a late write is checked

    def read(self, path: str) -> bytes:
        data = super().read(path)
        if not self.paused:
            self.paused = True
            assert self.holder.try_acquire()
            time.sleep(self.pause)
            for _ in range(KEEP_RECORDS + PRUNE_BATCH):
                assert self.holder.try_acquire()
        return data


def test_a_taker_paused_until_its_number_was_pruned_does_not_hold_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A taker reads a free lease, pauses; another holder takes it, and again and again until the number
    the taker will write is pruned. The taker's conditional write then succeeds, on a number that existed
    before: it must find the newer records and not hold the lease."""
    monkeypatch.setattr(lease_module, "PRUNE_AGE", 0.2)
    plain = open_store(str(tmp_path), StorageOptions())
    Lease(plain, "merge-r", ttl=300).acquire().release()  # a free lease: record 2
    holder = Lease(plain, "merge-r", ttl=300)
    taker = Lease(_PausedAfterReading(tmp_path, holder, pause=0.3), "merge-r", ttl=300)
    assert not taker.try_acquire(), "the paused taker holds a lease another holder holds"
    assert taker.held is None
    assert holder.try_acquire() and holder.held is not None, "the other holder kept it"
    assert holder.held.seq > KEEP_RECORDS


def test_a_lease_taken_once_a_round_prunes_in_one_batch_delete_every_batch_of_rounds(
    seaweed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge takes each region's lease once a round and never gives it back (its record is done at the
    generation merged). Past KEEP_RECORDS rounds, each take pruned one record with a DELETE of its own: a
    request per region per round. Records now go a batch at a time, in one DeleteObjects request."""
    monkeypatch.setattr(lease_module, "PRUNE_AGE", 0.0)
    store = open_store(
        f"s3://memwal-test/storage-{uuid.uuid4().hex}", StorageOptions(seaweed.storage_options())
    )
    rounds = KEEP_RECORDS + 2 * PRUNE_BATCH
    for generation in range(1, rounds + 1):
        Lease(store, "merge-r", ttl=60, done_at=generation, progress=generation - 1).acquire()
    deletes = by_kind(store.stats.snapshot())["DELETE"]
    assert deletes == 2, f"{deletes} delete requests over {rounds} rounds (one a round past the first 16)"
    records = store.list_files(f"{LEASE_DIR}/merge-r")
    assert KEEP_RECORDS <= len(records) <= KEEP_RECORDS + PRUNE_BATCH, len(records)
