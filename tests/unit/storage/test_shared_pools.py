"""A process watching many tables holds one I/O pool per size, not one per store."""

from __future__ import annotations

import threading
from pathlib import Path

from memwal_core.storage.local import LocalStore


def io_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("memwal-io-")}


def test_stores_of_many_tables_share_their_io_threads(tmp_path: Path) -> None:
    stores = [LocalStore(tmp_path / f"t{i}", parallelism=4) for i in range(40)]
    for i, store in enumerate(stores):
        store.write(f"o{i}", b"x")
    for _tick in range(3):
        for store in stores:
            assert store.map(lambda n: n * 2, list(range(8))) == [n * 2 for n in range(8)]
    sized = {name for name in io_threads() if name.startswith("memwal-io-4_")}
    assert 0 < len(sized) <= 4, sorted(sized)


def test_a_task_on_the_pool_maps_inline_instead_of_waiting_on_its_own_pool(tmp_path: Path) -> None:
    outer, inner = LocalStore(tmp_path / "a", parallelism=2), LocalStore(tmp_path / "b", parallelism=2)
    # Every pool thread waits on an inner map of the same shared pool: inline, or this deadlocks.
    found = outer.map(lambda n: inner.map(lambda m: (n, m), [0, 1, 2]), [0, 1, 2, 3])
    assert found == [[(n, m) for m in range(3)] for n in range(4)]
