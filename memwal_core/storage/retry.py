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

    def delay(self, attempt: int) -> float:
        """Backoff before retry number `attempt` (1-based), with full jitter."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(cap / 2, cap)

    def run(self, call: Callable[[], T], is_transient: Callable[[BaseException], bool]) -> T:
        """Run `call`, retrying only errors `is_transient` accepts, at most `attempts` times."""
        attempt = 1
        while True:
            try:
                return call()
            except Exception as exc:
                if attempt >= self.attempts or not is_transient(exc):
                    raise
                time.sleep(self.delay(attempt))
                attempt += 1
