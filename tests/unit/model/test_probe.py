"""`probe_run_end` on local disk: where a run of numbered objects ends, in O(log n) HEADs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.model.region_store import probe_run_end, run_start
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.stores import open_store


def path_of(number: int) -> str:
    return f"run/{number}"


def store_with(tmp_path: Path, numbers: Iterable[int]) -> ObjectStore:
    store = open_store(str(tmp_path / "store"))
    for number in numbers:
        store.write(path_of(number), b"")
    store.stats.reset()
    return store


def probe(store: ObjectStore, start: int) -> int:
    return probe_run_end(store, path_of, start, what="entry", where="run")


def test_nothing_after_start_costs_one_head(tmp_path: Path) -> None:
    store = store_with(tmp_path, range(1, 6))
    assert probe(store, 5) == 5
    assert store.stats.snapshot() == {"head": 1}


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 8, 9, 31, 100, 1000])
@pytest.mark.parametrize("start", [0, 40])
def test_a_run_of_n_costs_about_two_log_n_heads(tmp_path: Path, start: int, length: int) -> None:
    # Numbers below `start` deleted (as GC deletes a prefix), or never there.
    store = store_with(tmp_path, range(max(start, 1), start + length + 1))
    assert probe(store, start) == start + length
    heads = store.stats.snapshot()["head"]
    assert heads <= 2 * math.log2(length) + 4, f"{heads} HEADs for a run of {length}"


def test_a_gap_right_after_the_end_is_corrupt(tmp_path: Path) -> None:
    store = store_with(tmp_path, [1, 2, 4])
    with pytest.raises(CorruptMetadataError, match="entry 3 is missing but later ones exist"):
        probe(store, 1)


@pytest.mark.parametrize("gap", [2, 3, 5, 9, 10, 17, 60, 99])
@pytest.mark.parametrize("after", [1, 2, 40])
def test_the_end_found_is_never_followed_by_a_one_number_gap(tmp_path: Path, gap: int, after: int) -> None:
    """Wherever the gallop and bisection end, the number after next is looked at: the probe either
    found the newest number or names the gap that would hide it."""
    store = store_with(tmp_path, [*range(1, gap), *range(gap + 1, gap + 1 + after)])
    try:
        end = probe(store, 0)
    except CorruptMetadataError as exc:
        assert f"entry {gap} is missing but later ones exist" in str(exc)
    else:
        assert end == gap + after


def test_a_gap_the_gallop_jumps_hides_nothing_from_it(tmp_path: Path) -> None:
    """Numbers 1-3 and 5-6: the gallop lands on 5, so 6 is found; finding the gap would cost a HEAD
    per number."""
    store = store_with(tmp_path, [1, 2, 3, 5, 6])
    assert probe(store, 1) == 6


def test_a_number_written_between_looks_is_not_a_gap(tmp_path: Path) -> None:
    """A live writer's 3 lands just after the probe saw it missing, and before the probe sees its 4."""
    store = store_with(tmp_path, [1, 2, 4])
    head = store.exists

    def writer_lands_after_first_look(path: str) -> bool:
        found = head(path)
        if path == path_of(3) and not found:
            store.write(path_of(3), b"")
        return found

    store.exists = writer_lands_after_first_look  # type: ignore[method-assign]
    assert probe(store, 1) == 4


def start_of(store: ObjectStore, end: int, guess: int | None) -> int:
    return run_start(lambda n: store.exists(path_of(n)), end, guess=guess)


@pytest.mark.parametrize(("first", "end"), [(1, 1), (1, 2), (1, 1000), (37, 38), (500, 1000), (999, 1000)])
def test_where_a_run_starts_costs_log_n_heads_and_a_right_guess_two(
    tmp_path: Path, first: int, end: int
) -> None:
    """Numbers below `first` deleted (as GC deletes a prefix): no LIST, a bisection of HEADs."""
    store = store_with(tmp_path, range(first, end + 1))
    assert start_of(store, end, None) == first
    assert store.stats.total() <= math.log2(end) + 1
    for wrong in (1, first - 1, first + 1, end, 10 * end):
        store.stats.reset()
        assert start_of(store, end, wrong) == first
        assert store.stats.total() <= math.log2(end) + 3, f"guess {wrong}: {store.stats.total()} HEADs"
    store.stats.reset()
    assert start_of(store, end, first) == first
    assert store.stats.total() <= 2


def test_a_number_known_not_stored_bounds_where_the_run_starts(tmp_path: Path) -> None:
    """A listing's sample: 496 is a multiple of 16 not listed, 512 the first listed: four HEADs."""
    store = store_with(tmp_path, range(500, 1001))
    assert run_start(lambda n: store.exists(path_of(n)), 512, after=496) == 500
    assert store.stats.total() <= 4
