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
lag threshold, so a new flush is merged well within it. Each region is probed
at its own phase of those intervals, so the probes of a table's quiet regions
are spread over the ticks instead of falling on the same one: the first flush
of a burst is met within a tick or two, and the poller then probes the whole
table (`backlog_since`).

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

        Every tick while the interval is a tick. Otherwise, without a key, at the last tick that
        keeps the gap within the interval; with one, on a grid: a probe falls due where the number
        of probes the intervals allow since the last change (`_probes_by`) passes an integer plus
        the key's phase (from a hash of `key`), looking a tick ahead. The gaps are the same, but
        each key keeps its own phase of them, so a table's regions that changed together are
        probed a few at a time every tick, not all on the same tick every interval: the first
        flush of a burst meets a probe within a tick or two (and the poller then probes the rest
        of the table at once). In lock-step, a table quiet for ten minutes met a burst up to 150 s
        late (a quarter of its quiet). The grid's spacing stops a tick short of the bound, so
        probes are never more than the bound apart.
        """
        if clock is None:
            return True
        gap = now - clock.probed_at
        idle = now - clock.changed_at
        pace = clock.gap if clock.gap is not None and clock.gap <= 2 * self.bound else 0.0
        # A steady pace: its next change is a gap away.
        interval = probe_interval(max(idle, pace), self.tick, self.bound)
        if gap < 0 or interval <= self.tick or not key or self.bound <= 2 * self.tick:
            return gap < 0 or gap >= interval - self.tick
        phase = zlib.crc32(key.encode()) / 2**32

        def grid(at_idle: float) -> int:
            return math.floor(self._probes_by(at_idle + self.tick, pace) + phase)

        return grid(idle) > grid(max(0.0, clock.probed_at - clock.changed_at))

    def _probes_by(self, idle: float, pace: float) -> float:
        """How many probes the intervals allow in the first `idle` seconds after a change (the integral
        of 1 / interval), for something changing every `pace` seconds (0: no pace kept).

        The interval is a quarter of the time since the change (of `pace`, while less than that has
        passed), at least a tick and at most a tick short of the bound.
        """
        top = self.bound - self.tick

        def spread(since: float) -> float:
            """The integral from 0 to `since` of 1 / min(max(t / 4, tick), top)."""
            low, high = 4 * self.tick, 4 * top
            if since <= low:
                return since / self.tick
            if since <= high:
                return low / self.tick + 4 * math.log(since / low)
            return low / self.tick + 4 * math.log(high / low) + (since - high) / top

        paced = min(max(pace / 4, self.tick), top)
        if idle <= pace:
            return idle / paced
        return pace / paced + spread(idle) - spread(pace)


# A poller that probes everything on every read (a bound of 0).
EVERY_READ = Backoff(tick=0.0, bound=0.0)
