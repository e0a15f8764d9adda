"""How a read is cut into Spark partitions: fragments in order, regions whole, about equal rows each."""

from __future__ import annotations

import pickle

import pyarrow as pa

from memwal_core.model.evolution import TableFields
from memwal_core.services.reader import RegionRead
from memwal_core.services.spark_read.plan import FragmentRows, ReadSlice, SourcePlan, slices


def region(name: str, rows: int | None, generations: int = 2) -> RegionRead:
    return RegionRead(
        name, 1, generations + 1, 0, tuple((g, f"x_gen_{g}") for g in range(1, generations + 1)), (), rows
    )


def plan(fragments: list[int], regions: list[RegionRead], per_partition: int = 100) -> SourcePlan:
    return SourcePlan(
        table_uri="/t",
        table_version=3,
        primary_key=("id",),
        columns=("id",),
        fields=TableFields(pa.schema([("id", pa.int64())]), (0,)),
        fragments=tuple(FragmentRows(i, rows) for i, rows in enumerate(fragments)),
        regions=tuple(regions),
        spec=None,
        rows_per_partition=per_partition,
    )


def test_fragments_are_grouped_in_order_up_to_the_partition_size() -> None:
    assert slices(plan([40, 40, 40, 150, 10], [])) == [
        ReadSlice((0, 1), ()),
        ReadSlice((2,), ()),
        ReadSlice((3,), ()),
        ReadSlice((4,), ()),
    ]


def test_regions_go_whole_to_the_lightest_slice_largest_first() -> None:
    cut = slices(plan([100, 60], [region("a", 10), region("b", 50), region("c", 30)], per_partition=150))
    assert cut == [ReadSlice((0,), ("c",)), ReadSlice((1,), ("b", "a"))]


def test_pending_rows_beyond_the_base_slices_get_slices_of_their_own() -> None:
    cut = slices(plan([100], [region(r, 100) for r in "abc"]))
    assert len(cut) == 3, "400 rows in slices of at most 150"
    assert sorted(r for s in cut for r in s.regions) == ["a", "b", "c"]
    assert [s.fragments for s in cut] == [(0,), (), ()]


def test_a_few_pending_rows_join_the_base_slices_instead_of_adding_a_round_of_tasks() -> None:
    cut = slices(plan([100, 100, 100, 90], [region(r, 15) for r in "abcd"]))
    assert [s.fragments for s in cut] == [(0,), (1,), (2,), (3,)]
    assert sorted(len(s.regions) for s in cut) == [1, 1, 1, 1]


def test_a_region_without_recorded_rows_counts_an_estimate_per_generation() -> None:
    cut = slices(plan([], [region("a", None, generations=3)], per_partition=1_000_000))
    assert cut == [ReadSlice((), ("a",))]


def test_nothing_to_read_is_no_slice_and_the_plan_pickles_small() -> None:
    empty = plan([], [])
    assert slices(empty) == []
    big = plan([1_000_000] * 64, [region(f"{r:036d}", 50_000, generations=8) for r in range(32)])
    assert len(pickle.dumps(big)) < 64_000
    assert all(len(pickle.dumps(s)) < 2_000 for s in slices(big))
