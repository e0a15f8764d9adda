"""Text for people, from results built in memory."""

from __future__ import annotations

import pytest

from memwal_core.cli.render import plural, render
from memwal_core.services.compact import CompactionPlan, CompactionResult
from memwal_core.services.consistency import ConsistencyResult
from memwal_core.storage.retry import Throttled


def nothing_to_compact(fragments: int) -> CompactionResult:
    plan = CompactionPlan("t", 3, {}, (), 0, 0, fragments, 0)
    return CompactionResult(
        table="t",
        read_version=3,
        seconds=0.1,
        engine="local",
        engine_reason="named",
        plan=plan,
        fragments_before=fragments,
        fragments_after=fragments,
        fragments_removed=0,
        fragments_added=0,
        rows_rewritten=0,
        seconds_plan=0.1,
        seconds_execute=0.0,
        seconds_commit=0.0,
    )


def test_nothing_to_compact_counts_fragments_in_good_english() -> None:
    assert (
        render(nothing_to_compact(1)) == "compaction of t (local engine)\n  nothing to compact (1 fragment)"
    )
    assert render(nothing_to_compact(2)).endswith("nothing to compact (2 fragments)")
    assert [plural(n, "region") for n in (0, 1, 2)] == ["0 regions", "1 region", "2 regions"]


def test_a_throttled_result_says_what_throttling_cost_it() -> None:
    throttled = nothing_to_compact(1).with_throttled(Throttled(4, 3.14))
    assert render(throttled) == (
        "compaction of t (local engine)\n  nothing to compact (1 fragment)\n"
        "  throttled: storage asked to slow down 4 times; requests waited 3.1 s on it"
    )


def test_a_result_without_a_text_form_is_refused_not_printed_as_a_repr() -> None:
    checked = ConsistencyResult(
        table="t", read_version=1, seconds=0.0, expected_rows=0, lsm_rows=0, sampled_keys=0, mismatches=[]
    )
    with pytest.raises(TypeError, match="no text form for ConsistencyResult"):
        render(checked)
