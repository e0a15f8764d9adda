"""When GC scans a WAL folder for abandoned uploads again: a record it cannot trust means now."""

from __future__ import annotations

import math
from pathlib import Path

from memwal_core.format.naming import WAL_TEMP_SCANS_FILE
from memwal_core.services.gc.wal_temps import read_dues, scan_due, write_dues
from memwal_core.storage.local import LocalStore

DAY = 86_400.0


def test_a_scan_is_due_without_a_record_or_once_its_time_came() -> None:
    now = 1_000_000.0
    assert scan_due(None, now, DAY)
    assert not scan_due(now + 60, now, DAY)
    assert scan_due(now, now, DAY) and scan_due(now - 60, now, DAY)


def test_a_due_no_scan_of_this_clock_could_have_set_means_now() -> None:
    now = 1_000_000.0
    assert scan_due(now + DAY + 1, now, DAY), "further ahead than the age: the clock was set back"
    assert scan_due(math.nan, now, DAY) and scan_due(math.inf, now, DAY)


def test_a_garbled_record_reads_as_none(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    assert read_dues(store) == {}
    write_dues(store, {"a": 5.0, "b": 7})
    assert read_dues(store) == {"a": 5.0, "b": 7.0}
    for garbled in (b"{", b"[]", b'{"regions": 3}', b'{"regions": {"a": "5", "b": true, "c": null}}'):
        store.write(WAL_TEMP_SCANS_FILE, garbled)
        assert read_dues(store) == {}
