"""Progress for long commands: a bar on a terminal, one log line per region otherwise."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

BAR_WIDTH = 30


class RegionProgress:
    """Renders `done/total regions` on stderr when it is a terminal; silent otherwise.

    On a terminal, the per-region INFO log lines are held back (the bar replaces
    them); elsewhere they are the progress report, one line per region.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        if self.enabled:
            logging.getLogger("memwal_core").setLevel(logging.WARNING)

    def __call__(self, done: int, total: int, region: str) -> None:
        if not self.enabled or total == 0:
            return
        filled = BAR_WIDTH * done // total
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.stream.write(f"\r[{bar}] {done}/{total} regions  {region[:8]}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()
