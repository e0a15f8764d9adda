"""The pollers' backoff: every tick while something changes, down to once per bound, a change seen within it."""

from __future__ import annotations

from itertools import pairwise

import pytest

from memwal_core.services.backoff import EVERY_READ, Backoff, Clock, probe_interval, probed

# A 5 s tick and a bound of an eighth of a 900 s lag threshold (the sensor's is a quarter).
SENSOR = Backoff(tick=5.0, bound=900 / 8)
HOUR = 3600.0


def poll(backoff: Backoff, span: float, changes: list[float], key: str = "") -> list[tuple[float, bool]]:
    """A poller ticking from 0 to `span` over `key`, which changes at `changes`: each probe and what it found."""
    clock: Clock | None = None
    probes: list[tuple[float, bool]] = []
    for step in range(int(span / backoff.tick) + 1):
        now = step * backoff.tick
        if backoff.due(clock, now, key):
            last = clock.probed_at if clock is not None else -1.0
            changed = any(last < at <= now for at in changes)
            clock = probed(clock, now, changed)
            probes.append((now, changed))
    return probes


def test_the_interval_grows_with_idle_time_from_one_tick_to_the_bound() -> None:
    assert probe_interval(0, 5, 112.5) == 5
    assert probe_interval(100, 5, 112.5) == 25
    assert probe_interval(HOUR, 5, 112.5) == 112.5
    assert probe_interval(HOUR, 5, 2) == 2, "a bound under a tick: every tick"


@pytest.mark.parametrize("key", ["", "a", "3f0c1a52-6a1d-4c85-9a39-0b1e5f1f5d2e"])
def test_a_quiet_thing_is_probed_about_once_per_bound(key: str) -> None:
    probes = poll(SENSOR, HOUR, changes=[0.0], key=key)
    # The first minute at nearly every tick, then backing off to once per bound (every 110 s at 5 s
    # ticks; at its phase, once per 107.5 s window, so never more than the bound apart).
    late = [at for at, _changed in probes if at >= 30 * 60]
    assert 60 * len(late) / (HOUR - 30 * 60) <= 0.57
    assert len(probes) <= 60, len(probes)
    assert max(b - a for (a, _), (b, _) in pairwise(probes)) <= SENSOR.bound


@pytest.mark.parametrize("key", ["", "region-7"])
@pytest.mark.parametrize("at", [601.0, 2000.0, 3333.3, 3599.0])
def test_a_change_after_a_long_quiet_is_seen_within_the_bound(at: float, key: str) -> None:
    probes = poll(SENSOR, HOUR + 200, changes=[0.0, at], key=key)
    seen = [when for when, changed in probes if changed and when > 0]
    assert seen and seen[0] - at <= SENSOR.bound
    # ... and then it is probed every tick again.
    after = [when for when, _changed in probes if when >= seen[0]][:4]
    assert after == [seen[0] + n * SENSOR.tick for n in range(4)]


def test_what_was_never_probed_or_probed_in_the_future_is_due() -> None:
    assert SENSOR.due(None, 0.0)
    # A clock ahead of this host's (another host wrote the cursor): probed now rather than never.
    assert SENSOR.due(Clock(changed_at=0.0, probed_at=500.0), 100.0)
    assert not SENSOR.due(Clock(changed_at=0.0, probed_at=HOUR), HOUR + SENSOR.tick)


def test_every_read_probes_every_time_and_a_first_probe_counts_as_a_change() -> None:
    assert all(EVERY_READ.due(Clock(0.0, HOUR), HOUR + t) for t in (0.0, 0.1, 1.0))
    assert probed(None, 7.0, changed=False) == Clock(7.0, 7.0)
    assert probed(Clock(1.0, 5.0), 9.0, changed=False) == Clock(1.0, 9.0)
    assert probed(Clock(1.0, 5.0), 9.0, changed=True) == Clock(9.0, 9.0, gap=8.0)
    assert probed(Clock(9.0, 9.0, gap=8.0), 12.0, changed=False) == Clock(9.0, 12.0, gap=8.0)
    assert Clock.from_list(Clock(1.5, 2.5).to_list()) == Clock(1.5, 2.5)
    assert Clock.from_list(Clock(1.5, 2.5, gap=60.0).to_list()) == Clock(1.5, 2.5, gap=60.0)
    assert Clock.from_list([1.5, 2.5]) == Clock(1.5, 2.5), "a cursor written before gaps were kept"


def test_something_changing_at_a_steady_pace_is_probed_about_four_times_per_change() -> None:
    """A region under a steady writer flushes every minute: probed every tick for 40 s after each
    flush, it cost 10 probes a minute (most of a busy table's watching); probed by the pace it keeps,
    4 to 6, and each flush is still seen within a quarter of the pace."""
    span = 30 * 60.0
    flushes = [7.0 + 60.0 * n for n in range(int(span / 60))]
    probes = poll(SENSOR, span, changes=flushes, key="region-1")
    per_minute = 60 * len(probes) / span
    assert 4 <= per_minute <= 6.5, per_minute
    seen = [at for at, changed in probes if changed]
    for flush in flushes[1:]:
        first = min(at for at in seen if at >= flush)
        assert first - flush <= 60 / 4 + SENSOR.tick
    # The same pace without the gap kept (the old clocks): every tick for the first 40 s.
    assert SENSOR.due(Clock(0.0, 5.0), 10.0)
    assert not SENSOR.due(Clock(0.0, 5.0, gap=60.0), 10.0)


def test_a_burst_after_a_long_quiet_is_probed_every_tick() -> None:
    """A gap longer than twice the bound says nothing of the next flush: a burst is met at once."""
    woke = Clock(HOUR, HOUR, gap=HOUR)
    assert SENSOR.due(woke, HOUR + SENSOR.tick)


def test_quiet_things_are_probed_at_their_own_phases_spread_over_the_ticks() -> None:
    """200 regions that last changed together: at the bound each is probed once per window, and the
    probes fall on most ticks rather than all on one, so a burst is met within a tick or two."""
    keys = [f"region-{n}" for n in range(200)]
    clocks = {k: Clock(0.0, 0.0) for k in keys}
    per_tick: list[int] = []
    last: dict[str, float] = {}
    for step in range(1, int(HOUR / SENSOR.tick) + 1):
        now = step * SENSOR.tick
        due = [k for k in keys if SENSOR.due(clocks[k], now, k)]
        for k in due:
            if now >= 1800:
                assert now - clocks[k].probed_at <= SENSOR.bound, "never later than the bound"
            clocks[k] = probed(clocks[k], now, changed=False)
            last[k] = now
        if now >= 1800:
            per_tick.append(len(due))
    windows = (HOUR - 1800) / SENSOR.bound
    assert sum(per_tick) <= len(keys) * (windows + 1), "once per window"
    # Lock-step probing would put all 200 on one tick in 22 and none on the others.
    assert max(per_tick) <= 30 and sum(1 for n in per_tick if n) >= 0.9 * len(per_tick), per_tick


def test_a_table_quiet_for_minutes_is_probed_on_most_ticks_below_the_bound() -> None:
    """Below the bound too: 200 regions that changed together were probed in lock-step, all on one
    tick every quarter of their quiet, so a burst ten minutes into a quiet met its first probe up to
    150 s late; at their own phases, some region is probed on nearly every tick."""
    sensor = Backoff(tick=5.0, bound=900 / 4)
    keys = [f"region-{n}" for n in range(200)]
    clocks = {k: Clock(0.0, 0.0) for k in keys}
    probed_on: list[float] = []
    for step in range(1, int(4 * sensor.bound / sensor.tick)):
        now = step * sensor.tick
        due = [k for k in keys if sensor.due(clocks[k], now, k)]
        for k in due:
            assert now - clocks[k].probed_at <= probe_interval(now, sensor.tick, sensor.bound) + sensor.tick
            clocks[k] = probed(clocks[k], now, changed=False)
        if due:
            probed_on.append(now)
    quiet = [at for at in probed_on if at >= 120]
    assert max(b - a for a, b in pairwise(quiet)) <= 2 * sensor.tick, quiet


@pytest.mark.parametrize("changes", [[0.0], [7.0 + 60.0 * n for n in range(60)], [0.0, 400.0, 2500.0]])
def test_phases_cost_no_more_probes_than_the_keyless_schedule(changes: list[float]) -> None:
    keyless = len(poll(SENSOR, HOUR, changes))
    for key in ("region-1", "region-2", "3f0c1a52-6a1d-4c85-9a39-0b1e5f1f5d2e"):
        assert len(poll(SENSOR, HOUR, changes, key=key)) <= keyless * 1.1 + 1
