"""GC's keep rules: which rule keeps a listed generation, and each region's bounds."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.services.gc.rules import (
    INDEX_NOT_CAUGHT_UP,
    NOT_MERGED,
    RETAINED_VERSION,
    GcPolicy,
    RegionBounds,
    region_bounds,
)

R = "region-a"


def test_keep_reason_names_the_first_rule_that_keeps() -> None:
    bounds = RegionBounds(merged=8, index_caught_up=6, retained=4)
    assert [bounds.keep_reason(g) for g in (9, 8, 7, 6, 5, 4, 1)] == [
        NOT_MERGED,
        INDEX_NOT_CAUGHT_UP,
        INDEX_NOT_CAUGHT_UP,
        RETAINED_VERSION,
        RETAINED_VERSION,
        None,
        None,
    ]


def test_bounds_take_the_slowest_index_and_the_oldest_retained_version() -> None:
    catchup = {"a": {R: 7}, "b": {R: 5, "other": 9}}
    retained = [{R: 6}, {R: 3}, {"other": 1}]
    bounds = region_bounds(R, 8, catchup, ["a", "b"], retained)
    # A retained version without this region has merged nothing of it: it keeps everything.
    assert bounds == RegionBounds(merged=8, index_caught_up=5, retained=0)


def test_an_index_missing_from_the_catchup_record_keeps_every_generation() -> None:
    bounds = region_bounds(R, 8, {"a": {R: 8}}, ["a", "new"], [])
    assert bounds.index_caught_up == 0 and bounds.keep_reason(1) == INDEX_NOT_CAUGHT_UP


def test_no_index_and_no_retained_version_let_merged_generations_go() -> None:
    bounds = region_bounds(R, 8, {}, [], [])
    assert bounds == RegionBounds(merged=8, index_caught_up=8, retained=8)
    assert bounds.keep_reason(8) is None and bounds.keep_reason(9) == NOT_MERGED


@pytest.mark.parametrize(
    "policy",
    [
        {"grace_seconds": -1},
        {"fence_retention_seconds": 3600},  # never as short as a grace period
        {"fence_retention_seconds": float("nan")},
        {"abandoned_after_seconds": -1},
        {"keep_manifest_versions": 0},
    ],
)
def test_a_policy_that_could_delete_too_much_is_bad_input(policy: dict[str, float]) -> None:
    with pytest.raises(BadInputError):
        GcPolicy(**policy)  # type: ignore[arg-type]


def test_the_fence_retention_is_a_week_unless_told() -> None:
    assert GcPolicy().fence_retention_seconds == 7 * 86_400
    assert GcPolicy(fence_retention_seconds=86_400).fence_retention_seconds == 86_400
