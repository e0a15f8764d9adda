"""What the outcome records sum: storage requests by kind (the one mapping from the stores' operations),
throttling, and what GC found the table holds; records written before these fields load as zero and nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import memwal_core.storage
from memwal_core.model.outcomes import GC, MERGE, Outcome, Stored, read_outcome, record_outcome
from memwal_core.storage.object_store import OPERATION_KINDS, REQUEST_KINDS, by_kind
from memwal_core.storage.retry import Throttled
from memwal_core.storage.stores import open_store

# A record as memwal wrote it before it counted requests or stored objects.
OLD_RECORD = {
    "service": "gc",
    "at": 1700000000.0,
    "ok": True,
    "error": None,
    "last_success_at": 1700000000.0,
    "failing": {},
}


def test_every_operation_a_store_counts_is_one_request_kind() -> None:
    """Every name the stores count under (local disk and S3) maps, so no request drops out of the totals."""
    counted: set[str] = set()
    for source in Path(memwal_core.storage.__file__).parent.glob("*.py"):
        counted |= set(re.findall(r'(?:_io|_call|stats\.add)\(\s*"(\w+)"', source.read_text()))
    assert counted == set(OPERATION_KINDS), counted ^ set(OPERATION_KINDS)
    assert set(OPERATION_KINDS.values()) == set(REQUEST_KINDS)
    assert by_kind({"put_if_not_exists": 2, "put": 1, "delete_many": 3, "list": 4}) == {
        "HEAD": 0,
        "GET": 0,
        "PUT": 3,
        "LIST": 4,
        "DELETE": 3,
    }


def test_a_local_store_counts_by_kind_and_keeps_its_lifetime_through_resets(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    store.write("a", b"1")
    store.put_if_not_exists("b", b"2")
    store.read("a")
    store.exists("a")
    store.list_files("")
    store.delete_many(["a", "b"])
    run = by_kind(store.stats.snapshot())
    assert run == {"HEAD": 1, "GET": 1, "PUT": 2, "LIST": 1, "DELETE": 2}
    store.stats.reset()
    store.exists("a")
    assert by_kind(store.stats.snapshot())["HEAD"] == 1
    assert by_kind(store.stats.lifetime()) == {**run, "HEAD": 2}


def test_an_old_record_loads_with_no_requests_and_nothing_stored(tmp_path: Path) -> None:
    old = Outcome.from_json(OLD_RECORD)
    assert old.requests == {} and old.stored == {} and old.stored_at is None
    assert old.throttled == Throttled()
    store = open_store(str(tmp_path / "table"))
    store.write(f"_memwal_outcomes/{GC}.json", json.dumps(OLD_RECORD).encode())
    stored = {"wal_entries": Stored(7, None), "region_manifests": Stored(3, 900)}
    store.stats.reset()
    written = record_outcome(store, GC, at=1700000100.0, ok=True, requests=store.stats, stored=stored)
    assert written is not None
    # The run made no request of its own here: the record's read, and its write as one PUT.
    assert written.requests == {"HEAD": 0, "GET": 1, "PUT": 1, "LIST": 0, "DELETE": 0}
    assert written.stored == stored and written.stored_at == 1700000100.0
    assert read_outcome(store, GC) == written, "what is written reads back the same"


def test_requests_add_up_and_what_is_stored_stays_until_a_run_finds_it_again() -> None:
    first = Outcome(MERGE, 0.0, True).then(
        at=10.0, ok=True, error=None, failed={}, succeeded=[], requests={"GET": 2, "PUT": 1}
    )
    found = {"pending_generations": Stored(4, 400)}
    second = first.then(
        at=20.0, ok=False, error="x", failed={}, succeeded=[], requests={"GET": 3}, stored=found
    )
    third = second.then(
        at=30.0,
        ok=True,
        error=None,
        failed={},
        succeeded=[],
        requests={"LIST": 1},
        throttled=Throttled(3, 2.5),
    )
    assert third.requests == {"GET": 5, "PUT": 1, "LIST": 1}
    assert third.then(
        at=40.0, ok=True, error=None, failed={}, succeeded=[], throttled=Throttled(1, 0.5)
    ).throttled == (Throttled(4, 3.0))
    assert third.stored == found and third.stored_at == 20.0, "a run that found nothing keeps the last"


@pytest.mark.parametrize(
    "bad", [{"requests": {"GET": "many"}}, {"stored": {"wal_entries": [1]}}, {"throttled": [1]}]
)
def test_a_record_whose_new_fields_are_damaged_is_ignored(tmp_path: Path, bad: dict[str, object]) -> None:
    store = open_store(str(tmp_path / "table"))
    store.write(f"_memwal_outcomes/{GC}.json", json.dumps({**OLD_RECORD, **bad}).encode())
    assert read_outcome(store, GC) is None
