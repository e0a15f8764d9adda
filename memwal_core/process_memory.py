"""How a long memwal process keeps the memory it has freed from piling up (glibc's malloc).

A merge round releases each batch's rows before the next batch starts, yet
its resident size still climbed by 40-50 MB over its first batches and
stayed there (`bench/merge_memory.py`). glibc's malloc gives a thread that
meets contention an arena of its own, up to eight per core, and the collapse
threads and Lance's runtime threads each fill and free several. Memory freed
in one arena is neither reused by threads of another nor given back to the
system, so each batch can land on pages the last one left unused elsewhere.
Two arenas, and handing back what is free after each batch, keep a round's
peak at about its first batch's.

Lance's scans read ahead 4 fragments by default. A merge commit scans
every key of the base table, and that read-ahead held up to 40 MB more at a
20M-row base than at a 1M-row one, on top of each batch's own rows; 2
fragments hold no more at 20M than at 1M, and the commit took no longer.

Only glibc's malloc is tuned: elsewhere (macOS, musl) the malloc calls do
nothing. A `MALLOC_ARENA_MAX` or `LANCE_DEFAULT_FRAGMENT_READAHEAD` the user
set is left as it is.
"""

from __future__ import annotations

import ctypes
import functools
import os

# mallopt's parameter number for the arena limit (glibc's malloc.h).
M_ARENA_MAX = -8
ARENAS = 2
# Lance reads this once, at its first scan in the process.
READAHEAD_ENV = "LANCE_DEFAULT_FRAGMENT_READAHEAD"
FRAGMENT_READAHEAD = "2"


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    # confstr, not platform.libc_ver(): that reads the interpreter's binary, and importing
    # platform alone took a tenth of the CLI's start.
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not Linux: no such name
        return None
    if not libc.startswith("glibc"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def bound_process_memory() -> None:
    """At most ARENAS malloc arenas for threads from now on, and Lance's scan read-ahead bounded.

    Called when `memwal_core` is imported, before Lance runs a scan or this
    process starts its threads (Spark executors import it with a task).
    """
    os.environ.setdefault(READAHEAD_ENV, FRAGMENT_READAHEAD)
    libc = _glibc()
    if libc is not None and "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(M_ARENA_MAX, ARENAS)


def release_freed() -> None:
    """Give the system back the free pages malloc holds, in every arena."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
