"""`Backoff`: how often a poller probes something that has stayed the same.

The flushed-generations sensor and the exporter read every region of a table
again and again, and almost every probe finds nothing: on a quiet table they
were most of its storage requests. Each keeps, per probed thing (a region's
manifest, the table's version, its region listing, ...), when it last saw it
change and when it last probed it (`Clock`). Something idle for t seconds is
probed every min(max(t/4, tick), bound): every tick while it changes, then
less often the longer it stays the same, never less often than `bound`. A
probe is due at the last tick that keeps the gap within that interval (a
tick early rather than late), so with ticks on time a change after a long
quiet is seen within `bound`: the sensor's bound is a quarter of the table's
lag threshold, so a new flush is merged well within it. At the bound, each
thing is probed at its own phase of the bound-long window, so the probes of a
table's quiet regions are spread over the ticks instead of falling on the same
one: the first flush of a burst is met within a tick or two, and the poller
then probes the whole table (`backlog_since`).

Something that changes at a steady pace (a region under a steady writer
flushes every minute or so) counts as idle for at least the gap between its
last two changes: it is probed about four times per gap instead of every
tick for the first 40 seconds after each change, and its next change is seen
as soon as before (within a quarter of the gap). A gap longer than twice the
bound (a region woken after a long quiet) does not count: the next flush of
a burst is met within a tick.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """When a poller last saw something change, and when it last probed it (seconds since the epoch);
    `gap`: seconds between the two changes it saw last (None: fewer than two seen)."""

    changed_at: float
    probed_at: float
    gap: float | None = None

    def to_list(self) -> list[float]:
        """A compact JSON form (for a sensor's cursor)."""
        return [self.changed_at, self.probed_at, *([] if self.gap is None else [self.gap])]

    @classmethod
    def from_list(cls, data: Sequence[float]) -> Clock:
        """From `to_list`'s form (a cursor written before gaps were kept has two numbers)."""
        changed, probed, *gap = data
        return cls(float(changed), float(probed), float(gap[0]) if gap else None)


def probed(clock: Clock | None, now: float, changed: bool) -> Clock:
    """The clock after a probe at `now`; something probed for the first time counts as just changed."""
    if clock is None:
        return Clock(now, now)
    if changed:
        return Clock(now, now, now - clock.changed_at)
    return Clock(clock.changed_at, now, clock.gap)


def probe_interval(idle: float, tick: float, bound: float) -> float:
    """Seconds between probes of something idle for `idle` seconds."""
    return min(max(idle / 4, tick), bound)


@dataclass(frozen=True)
class Backoff:
    """A poller's schedule: it reads every `tick` seconds, and probes nothing less often than every `bound`."""

    tick: float
    bound: float

    def due(self, clock: Clock | None, now: float, key: str = "") -> bool:
        """Whether a probe of `key` is due at `now` (always for something never probed, or a clock ahead
        of `now`).

        Once the interval reaches the bound, `key` is probed once per window (a tick shorter than the
        bound), at the tick just before its own phase in it (from a hash of `key`): a table's regions are then probed a few
        at a time every tick rather than all together every bound, so a burst of flushes meets a probe
        within a tick or two (and the poller then probes the rest of the table at once).
        """
        if clock is None:
            return True
        gap = now - clock.probed_at
        idle = now - clock.changed_at
        if clock.gap is not None and clock.gap <= 2 * self.bound:
            idle = max(idle, clock.gap)  # a steady pace: its next change is a gap away
        interval = probe_interval(idle, self.tick, self.bound)
        if gap < 0 or interval < self.bound or not key or self.bound <= self.tick:
            return gap < 0 or gap >= interval - self.tick
        # Windows one tick shorter than the bound: ticks fall anywhere within a tick of a phase, so
        # probes at the phases of windows this long are never more than the bound apart.
        period = self.bound - self.tick
        phase = zlib.crc32(key.encode()) / 2**32 * period

        def window(at: float) -> float:
            return math.floor((at + self.tick - phase) / period)

        return window(now) > window(clock.probed_at)


# A poller that probes everything on every read (a bound of 0).
EVERY_READ = Backoff(tick=0.0, bound=0.0)
