"""Argument types of the `memwal` command: every number is checked before anything is read or written.

argparse turns the ArgumentTypeError into one line on stderr and exit status 2,
naming the flag, so a NaN grace period or a zero MemTable size never reaches a
service (a NaN compares false with everything and would bypass a policy). The
range checks are the library's own (`memwal_core.arguments`), which the
Dagster table list uses too. Text that is no number is not quoted back: it may
be a credential typed in the wrong place (`errors.quoted`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from memwal_core.arguments import INT64_MAX, finite, whole
from memwal_core.errors import BadInputError, quoted


def count(minimum: int = 1, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """A whole number from `minimum` to `maximum`."""

    def parse(text: str) -> int:
        try:
            return whole(repr(text), int(text.strip()), minimum, maximum)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not a whole number") from None
        except BadInputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def number(minimum: float, maximum: float) -> Callable[[str], float]:
    """A finite number from `minimum` to `maximum`."""

    def parse(text: str) -> float:
        try:
            return finite(repr(text), float(text.strip()), minimum, maximum)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not a number") from None
        except BadInputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as argparse takes it."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError("not HOST:PORT (e.g. 127.0.0.1:9464)")
    return host, int(port)
