"""Bounded retries with exponential backoff and jitter for transient storage errors.

A store that throttles (S3's `503 SlowDown`) is not failing: it asks for fewer
requests, often for a few seconds at a time. Five attempts within 0.75 s gave up
inside such a burst, so a throttled request is retried for as long as the
request's time budget (`deadline`) allows, from a longer backoff, and the time
spent waiting is counted (`ThrottleClock`) so a result can say what throttling cost.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def _never(_exc: BaseException) -> bool:
    return False


@dataclass(frozen=True)
class Throttled:
    """How often a store answered "slow down", and the seconds requests waited on it."""

    responses: int = 0
    seconds: float = 0.0

    def __add__(self, other: Throttled) -> Throttled:
        return Throttled(self.responses + other.responses, self.seconds + other.seconds)

    def __sub__(self, other: Throttled) -> Throttled:
        return Throttled(self.responses - other.responses, self.seconds - other.seconds)


# Nothing throttled: the default of a result or record that did not meet throttling.
NOT_THROTTLED = Throttled()


class ThrottleClock:
    """Counts throttled responses, and the wall-clock time during which at least one request waited
    to retry one: 64 requests held back together for a second cost their run a second, not 64.

    `reset` starts a new count (a service's run); `lifetime` keeps counting through resets.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._responses = 0
        self._seconds = 0.0
        self._waiting = 0
        self._since = 0.0
        self._at_reset = NOT_THROTTLED

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Around the wait after one throttled response."""
        with self._lock:
            self._responses += 1
            if self._waiting == 0:
                self._since = time.monotonic()
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1
                if self._waiting == 0:
                    self._seconds += time.monotonic() - self._since

    def lifetime(self) -> Throttled:
        """Everything since the clock was made, a wait under way included."""
        with self._lock:
            return self._total()

    def snapshot(self) -> Throttled:
        """Since the last `reset`."""
        with self._lock:
            return self._total() - self._at_reset

    def reset(self) -> None:
        with self._lock:
            self._at_reset = self._total()

    def _total(self) -> Throttled:
        ongoing = time.monotonic() - self._since if self._waiting else 0.0
        return Throttled(self._responses, self._seconds + ongoing)


def _backoff(retry: int, base: float, cap: float) -> float:
    """The wait before retry number `retry` (1-based): exponential, with jitter over its upper half."""
    top = min(cap, base * (2 ** (retry - 1)))
    return random.uniform(top / 2, top)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    A failure is retried at most `attempts` times in all; a throttled one (the store asked to slow
    down) for as long as the deadline allows, from the longer `throttled_delay`, since the store
    only wants time. Without a deadline a throttled failure counts as any other.
    """

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    # Backoff after a throttled response: its first wait, and the longest.
    throttled_delay: float = 0.25
    max_throttled_delay: float = 8.0
    # Seconds all attempts together may take, and the longest one attempt can take: no
    # attempt starts that could end after the deadline (None: no deadline).
    deadline: float | None = None
    attempt_limit: float = 0.0

    def run(
        self,
        call: Callable[[], T],
        is_transient: Callable[[BaseException], bool],
        *,
        is_throttled: Callable[[BaseException], bool] = _never,
        clock: ThrottleClock | None = None,
    ) -> T:
        """Run `call`, retrying errors `is_transient` accepts; those `is_throttled` accepts (transient
        too) within the deadline, their waits counted on `clock`."""
        started = time.monotonic()
        longest = self.attempt_limit
        failed = throttled = 0
        while True:
            begun = time.monotonic()
            try:
                return call()
            except Exception as exc:
                # An attempt may outlast its nominal limit (a client retrying inside it).
                longest = max(longest, time.monotonic() - begun)
                slow = self.deadline is not None and is_throttled(exc)
                if slow:
                    throttled += 1
                    pause = _backoff(throttled, self.throttled_delay, self.max_throttled_delay)
                else:
                    failed += 1
                    if failed >= self.attempts or not is_transient(exc):
                        raise
                    pause = _backoff(failed, self.base_delay, self.max_delay)
                pause = min(pause, self._room(time.monotonic() - started, longest))
                if pause < 0:
                    raise
                with clock.waiting() if slow and clock is not None else nullcontext():
                    time.sleep(pause)

    def _room(self, at: float, longest: float) -> float:
        """How long a retry may wait `at` seconds in, so that an attempt as long as the longest so far
        ends by the deadline (negative: it cannot)."""
        return float("inf") if self.deadline is None else self.deadline - at - longest
