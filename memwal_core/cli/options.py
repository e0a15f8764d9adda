"""Argument types of the `memwal` command: every number is checked before anything is read or written.

argparse turns the ArgumentTypeError into one line on stderr and exit status 2,
naming the flag, so a NaN grace period or a zero MemTable size never reaches a
service (a NaN compares false with everything and would bypass a policy).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from memwal_core.services.writer import INT64_MAX


def count(minimum: int = 1, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """A whole number from `minimum` to `maximum`."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{text!r} is not from {minimum} to {maximum}")
        return value

    return parse


def number(minimum: float, maximum: float) -> Callable[[str], float]:
    """A finite number from `minimum` to `maximum`."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a finite number from {minimum:g} to {maximum:g}"
            )
        return value

    return parse
