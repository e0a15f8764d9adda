"""Bounded retries with exponential backoff and jitter for transient storage errors."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure."""

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    # Seconds all attempts together may take, and the longest one attempt can take: no
    # attempt starts that could end after the deadline (None: no deadline).
    deadline: float | None = None
    attempt_limit: float = 0.0

    def delay(self, attempt: int) -> float:
        """Backoff before retry number `attempt` (1-based), with full jitter."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(cap / 2, cap)

    def run(self, call: Callable[[], T], is_transient: Callable[[BaseException], bool]) -> T:
        """Run `call`, retrying only errors `is_transient` accepts, at most `attempts` times."""
        started = time.monotonic()
        longest = self.attempt_limit
        attempt = 1
        while True:
            begun = time.monotonic()
            try:
                return call()
            except Exception as exc:
                # An attempt may outlast its nominal limit (a client retrying inside it).
                longest = max(longest, time.monotonic() - begun)
                if attempt >= self.attempts or not is_transient(exc):
                    raise
                pause = self.delay(attempt)
                if not self._may_start(time.monotonic() - started + pause, longest):
                    raise
                time.sleep(pause)
                attempt += 1

    def _may_start(self, at: float, longest: float) -> bool:
        """Whether an attempt starting `at` seconds in, as long as the longest so far, ends in time."""
        return self.deadline is None or at + longest <= self.deadline
