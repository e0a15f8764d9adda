"""A local listing while another process deletes what it lists: names that vanish drop out, the rest stay.

A listing that failed on a vanished name used to come back empty, and a lease read from it looked
never taken: a compaction took the index-details lease at record 1 while a merger held record 203.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memwal_core.errors import StorageError
from memwal_core.model import lease as lease_module
from memwal_core.model.lease import Lease
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store


def test_a_listing_keeps_what_stays_while_other_names_are_deleted(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), StorageOptions())
    store.write("d/keep.json", b"{}")
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            store.write(f"d/c{n % 50:02d}.json", b"{}")
            store.delete(f"d/c{(n + 25) % 50:02d}.json")
            n += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        listings = [{i.path for i in store.list_files("d")} for _ in range(3000)]
    finally:
        stop.set()
        worker.join()
    assert all("d/keep.json" in names for names in listings), "a listing lost a file nobody deleted"


def test_a_lease_is_never_taken_while_its_pruning_holder_renews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One holder takes its own lease again and again, as a merger does commit after commit (each take
    writes a record and prunes those 16 back); another asks for the lease throughout, and must never
    get it."""
    monkeypatch.setattr(lease_module, "PRUNE_AGE", 0.0)  # prune at once: the race at its widest
    store = open_store(str(tmp_path), StorageOptions())
    holder = Lease(store, "details", ttl=300).acquire()
    stop = threading.Event()
    taken: list[int] = []

    retakes: list[bool] = []

    def retake() -> None:
        while not stop.is_set():
            retakes.append(holder.try_acquire())

    worker = threading.Thread(target=retake)
    worker.start()
    try:
        for _ in range(800):
            rival = Lease(store, "details", ttl=300)
            if rival.try_acquire():
                taken.append(rival.held.seq if rival.held else -1)
    finally:
        stop.set()
        worker.join()
    assert not taken, f"a second holder took the lease at record(s) {taken[:5]}"
    assert len(retakes) > 100 and all(retakes), "the holder kept its lease, taking it again throughout"


def test_only_a_missing_directory_lists_as_empty(tmp_path: Path) -> None:
    """A directory that does not exist lists as empty; a listing that fails for any other reason raises,
    so no caller mistakes a failure for "nothing there" (as the lease once did)."""
    store = open_store(str(tmp_path), StorageOptions())
    store.write("d/sub/f.json", b"{}")
    store.write("plain", b"x")
    assert store.list_files("missing") == []
    assert store.list_files("missing", recursive=True) == []
    assert store.list_dirs("missing") == []
    assert store.temporary_files("missing") == []
    assert [i.path for i in store.list_files("d", recursive=True)] == ["d/sub/f.json"]
    for listing in (
        lambda: store.list_files("plain"),
        lambda: store.list_files("plain", recursive=True),
        lambda: store.list_dirs("plain"),
        lambda: store.temporary_files("plain"),
    ):
        with pytest.raises(StorageError, match="plain"):
            listing()
