"""memwal's retries: a throttled request waits within its time budget, and the wait is counted once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from memwal_core.storage.retry import RetryPolicy, ThrottleClock, Throttled


class SlowDown(Exception):
    """What a throttling store answers."""


class Reset(Exception):
    """A connection reset: transient, not throttling."""


def failing(times: int, error: type[Exception]) -> tuple[list[float], Callable[[], str]]:
    """A call that raises `error` `times` times, then answers; the times it was called."""
    calls: list[float] = []

    def call() -> str:
        calls.append(time.monotonic())
        if len(calls) <= times:
            raise error()
        return "ok"

    return calls, call


WAIT = 0.2
QUICK = RetryPolicy(attempts=3, base_delay=0.001, throttled_delay=0.001, max_throttled_delay=0.01)


def test_a_throttled_request_outlasts_the_attempt_count_within_the_deadline() -> None:
    calls, call = failing(10, SlowDown)
    clock = ThrottleClock()
    policy = replace(QUICK, deadline=5.0)
    result = policy.run(
        call,
        lambda exc: isinstance(exc, SlowDown | Reset),
        is_throttled=lambda exc: isinstance(exc, SlowDown),
        clock=clock,
    )
    assert result == "ok" and len(calls) == 11
    waited = clock.lifetime()
    assert waited.responses == 10
    assert 0 < waited.seconds <= calls[-1] - calls[0]


def test_other_failures_keep_their_attempt_count() -> None:
    calls, call = failing(10, Reset)
    policy = replace(QUICK, deadline=5.0)
    with pytest.raises(Reset):
        policy.run(
            call, lambda exc: isinstance(exc, Reset), is_throttled=lambda exc: isinstance(exc, SlowDown)
        )
    assert len(calls) == 3


def test_throttling_gives_up_when_no_attempt_could_end_within_the_deadline() -> None:
    calls, call = failing(10**6, SlowDown)
    policy = replace(QUICK, deadline=0.3, attempt_limit=0.1)
    started = time.monotonic()
    with pytest.raises(SlowDown):
        policy.run(call, lambda exc: True, is_throttled=lambda exc: True)
    assert time.monotonic() - started <= 0.3
    assert len(calls) > 3, "throttling is not bound by the attempt count"


def test_waits_that_overlap_count_once_and_a_reset_starts_a_new_count() -> None:
    clock = ThrottleClock()

    def wait() -> None:
        with clock.waiting():
            time.sleep(WAIT)

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    together = clock.lifetime()
    assert together.responses == 8
    assert WAIT <= together.seconds < 4 * WAIT, "the wall-clock time held back, not 8 waits' sum"
    clock.reset()
    assert clock.snapshot() == Throttled()
    wait()
    run = clock.snapshot()
    assert run.responses == 1 and WAIT <= run.seconds < 4 * WAIT
    assert clock.lifetime().responses == 9
