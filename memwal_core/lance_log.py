"""What Lance itself may print on stderr, which memwal keeps for its one-line errors."""

from __future__ import annotations

import os

# Errors only, and not `lance::index`'s: Lance 14 logs "Index __lance_mem_wal has no fields" at ERROR
# twice in every merge-insert into a table with an index (the MemWAL index has no fields, by design).
# Lance's real failures reach memwal as exceptions, which it reports itself.
LANCE_LOG_FILTER = "error,lance::index=off"


def quiet_lance_log() -> None:
    """Apply `LANCE_LOG_FILTER` unless the user set `LANCE_LOG`; call before Lance is imported."""
    os.environ.setdefault("LANCE_LOG", LANCE_LOG_FILTER)
