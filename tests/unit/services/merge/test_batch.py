"""The batch rules of a merge round (pure: no Lance, no storage)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwal_core.errors import BadInputError
from memwal_core.services.merge.batch import (
    BYTES_PER_ROW_ASSUMED,
    MEMORY_SHARE,
    MergeBudget,
    machine_memory,
    next_batch,
)
from memwal_core.services.merge.plan import RegionMergePlan
from tests.unit.services.merge.plans import region


def all_batches(plans: list[RegionMergePlan], budget: MergeBudget) -> list[list[RegionMergePlan]]:
    batches = []
    pending = plans
    while pending:
        batch, pending = next_batch(pending, budget)
        assert batch, "a round must always make progress"
        batches.append(batch)
    return batches


def test_small_regions_share_one_batch() -> None:
    plans = [region(f"r{i}", [100]) for i in range(16)]
    batches = all_batches(plans, MergeBudget(max_rows=10_000, max_bytes=10**9))
    assert len(batches) == 1
    assert [p.region for p in batches[0]] == [f"r{i}" for i in range(16)]


def test_a_backlog_over_budget_is_merged_as_prefixes_in_order() -> None:
    plans = [region("big", [40] * 10)]
    batches = all_batches(plans, MergeBudget(max_rows=100, max_bytes=10**9))
    assert [[g.generation for g in b[0].generations] for b in batches] == [
        [1, 2],
        [3, 4],
        [5, 6],
        [7, 8],
        [9, 10],
    ]
    assert [b[0].merged_before for b in batches] == [0, 2, 4, 6, 8]


def test_a_generation_larger_than_the_budget_is_merged_alone() -> None:
    plans = [region("huge", [500, 10]), region("small", [10])]
    batches = all_batches(plans, MergeBudget(max_rows=100, max_bytes=10**9))
    assert [[(p.region, p.target_generation) for p in b] for b in batches] == [
        [("huge", 1)],
        [("huge", 2), ("small", 1)],
    ]


def test_the_byte_budget_binds_too() -> None:
    plans = [region("a", [10, 10, 10]), region("b", [10])]
    batches = all_batches(plans, MergeBudget(max_rows=10**6, max_bytes=250))
    assert [[(p.region, len(p.generations)) for p in b] for b in batches] == [
        [("a", 2)],
        [("a", 1), ("b", 1)],
    ]


@given(
    sizes=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=8), min_size=1, max_size=12),
    max_rows=st.integers(1, 200),
)
def test_every_generation_once_each_region_ascending_one_slice_per_batch(
    sizes: list[list[int]], max_rows: int
) -> None:
    plans = [region(f"r{i:02d}", s) for i, s in enumerate(sizes)]
    budget = MergeBudget(max_rows=max_rows, max_bytes=10**12)
    seen: dict[str, list[int]] = {p.region: [] for p in plans}
    for batch in all_batches(plans, budget):
        names = [p.region for p in batch]
        assert len(names) == len(set(names)), "a region twice in one commit"
        rows = sum(p.rows for p in batch)
        assert rows <= max_rows or (len(batch) == 1 and len(batch[0].generations) == 1)
        for p in batch:
            assert p.merged_before == (seen[p.region][-1] if seen[p.region] else 0)
            seen[p.region].extend(g.generation for g in p.generations)
    for p in plans:
        assert seen[p.region] == [g.generation for g in p.generations]


def test_default_budget_is_a_share_of_memory() -> None:
    budget = MergeBudget.default()
    assert budget.max_bytes == machine_memory() // MEMORY_SHARE
    assert budget.max_rows == budget.max_bytes // BYTES_PER_ROW_ASSUMED
    assert MergeBudget.default(max_rows=5).max_rows == 5


def test_a_budget_must_be_positive() -> None:
    for rows, size in [(0, 1), (1, 0), (-3, 1)]:
        try:
            MergeBudget(rows, size)
        except BadInputError as exc:
            assert str(exc).startswith(("MergeBudget max_rows must", "MergeBudget max_bytes must"))
        else:
            raise AssertionError(f"MergeBudget({rows}, {size}) accepted")


def test_commit_form_and_index_use() -> None:
    from memwal_core.errors import BadInputError
    from memwal_core.services.defaults import SINGLE, TWO_STEP
    from memwal_core.services.merge.commit import INDEX_SOURCE_RATIO, choose_commit

    base = 16_000_000
    small = base // INDEX_SOURCE_RATIO
    upsert_only = choose_commit(small, 0, base, True)
    assert (upsert_only.form, upsert_only.upsert_index) == (SINGLE, True)
    assert not choose_commit(small + 1, 0, base, True).upsert_index
    assert not choose_commit(30_000, 0, 10**12, True).upsert_index, "never past Lance's join memory pool"
    with_deletes = choose_commit(3000, 200, base, True)
    assert (with_deletes.form, with_deletes.delete_index, with_deletes.upsert_index) == (TWO_STEP, True, True)
    assert not choose_commit(30_000, 200, base, True).upsert_index, "a large upsert scans, even after deletes"
    assert not choose_commit(3000, 200, 100_000, True).upsert_index, "a small base is cheaper to scan"
    assert not choose_commit(3000, 200, base, False).delete_index, "no key index: the delete scans"
    assert not choose_commit(3000, 200_000, base, True).delete_index, "many deletes scan"
    assert choose_commit(3000, small, base, True).delete_index
    assert not choose_commit(3000, small + 1, base, True).delete_index, "an indexed delete costs per key"
    forced = choose_commit(small, 200, base, True, form=SINGLE)
    assert (forced.form, forced.delete_index, forced.upsert_index) == (SINGLE, False, False)
    assert choose_commit(5, 0, base, True, form=TWO_STEP).form == TWO_STEP
    with pytest.raises(BadInputError, match="unknown commit form"):
        choose_commit(1, 1, 1, True, form="three-step")
