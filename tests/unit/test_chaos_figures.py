"""bench/chaos.py's figures: the episodes, slopes and recovery times its verdicts rest on."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import (
    LONG_SOAK,
    MONITOR_POLL_SECONDS,
    SHORT,
    START_TIMEOUT_SECONDS,
    ChaosConfig,
    Fault,
    compressed_rules,
    episodes,
    last_hour_growth,
    overlaps,
    recovery_figures,
    slope_per_hour,
)
from tests.support.prometheus import ALERT_RULES


def test_episodes_are_runs_of_true_and_an_unknown_state_ends_one() -> None:
    points = [
        (0.0, False),
        (5.0, True),
        (10.0, True),
        (15.0, None),
        (20.0, True),
        (25.0, False),
        (30.0, True),
    ]
    assert episodes(points) == [(5.0, 15.0), (20.0, 25.0), (30.0, 30.0)]
    assert overlaps((14.0, 16.0), [(5.0, 15.0)]) and not overlaps((16.0, 19.0), [(5.0, 15.0), (20.0, 25.0)])


def test_a_slope_is_per_hour_and_flat_memory_has_none() -> None:
    growing = [(float(t), 100.0 + t / 60) for t in range(0, 1800, 15)]  # a MiB a minute
    assert slope_per_hour(growing) == pytest.approx(60.0)
    assert slope_per_hour([(float(t), 100.0) for t in range(0, 1800, 15)]) == 0.0
    assert slope_per_hour([(0.0, 1.0), (1.0, 5.0)]) == 0.0, "too few points to judge"


def test_recovery_is_timed_to_the_next_merge_and_an_overtaken_fault_is_not_measured() -> None:
    faults = [
        Fault("storage", started=0.0, recovered=30.0),
        Fault("postgres", started=40.0, recovered=45.0),  # the next merge comes after the next fault
        Fault("storage", started=50.0, recovered=60.0),
        Fault("schema_add", started=100.0, recovered=100.0),  # no merge before the end
    ]
    figures = recovery_figures(faults, merges=[10.0, 35.0, 70.0], end=120.0)
    assert figures["storage"] == {"count": 2, "measured": 2, "overtaken": 0, "median_s": 7.5, "max_s": 10.0}
    assert figures["postgres"]["measured"] == 0 and figures["postgres"]["overtaken"] == 1
    assert figures["schema_add"]["overtaken"] == 1


def test_only_the_unreadable_alerts_wait_is_shortened(tmp_path: Path) -> None:
    shortened = compressed_rules(ALERT_RULES, 30, tmp_path / "alerts.yml").read_text()
    shipped = ALERT_RULES.read_text()
    changed = [
        (before, after)
        for before, after in zip(shipped.splitlines(), shortened.splitlines(), strict=True)
        if before != after
    ]
    assert changed == [("        for: 5m", "        for: 30s")]
    unreadable = shortened.index("alert: MemwalTableUnreadable")
    assert shortened.index("for: 30s") > unreadable
    assert shortened.index("for: 30s") < shortened.index("alert:", unreadable + 1)


def test_every_mode_waits_out_the_deployments_longest_run_bound_before_judging_the_drain() -> None:
    """A worker killed before its run started holds the table's merge slot until run monitoring's start
    timeout; one killed after, until the run's max_runtime. The drain is judged after both."""
    for config in (SHORT, ChaosConfig(minutes=1, soak=LONG_SOAK)):
        longest = max(START_TIMEOUT_SECONDS, config.max_runtime) + MONITOR_POLL_SECONDS
        assert config.settle_seconds >= longest + 60, config


def test_memory_growth_is_judged_over_the_last_hour_of_a_life_that_long() -> None:
    rising = [(float(t), 100.0 + 10.0 * t / 3600) for t in range(0, 7201, 30)]
    assert last_hour_growth(rising) == pytest.approx(100 * 10 / 110)
    flat_then_rising = [
        (float(t), 200.0 if t < 3600 else 200.0 + 40.0 * (t - 3600) / 3600) for t in range(0, 7201, 30)
    ]
    assert last_hour_growth(flat_then_rising) == pytest.approx(20.0, rel=0.05)
    assert last_hour_growth([(float(t), 100.0) for t in range(0, 7201, 30)]) == 0.0
    assert last_hour_growth(rising[:100]) is None, "a life under an hour is not judged by it"
