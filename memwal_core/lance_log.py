"""How memwal's processes set up Lance's own log: errors only, without one spurious line.

Lance logs through Rust's env_logger, configured once from `LANCE_LOG` when the
`lance` module loads (setting it later has no effect). A merge commit that joins
through the key index logs `ERROR lance::index] Index __lance_mem_wal has no
fields` for the MemWAL system index, which has no fields by design, although
nothing failed. env_logger's only message filter is a regex a message must
match, without look-ahead, so the filter here is the complement of that one
message's prefix: every other message at the level still passes. A `LANCE_LOG`
the user set is left as it is.

The MemWAL writer's own errors (`lance::dataset::mem_wal::write`: a flush that
failed and is retried, a persistence failure) are off: each one that matters
reaches the caller as the error of the call it failed, which memwal names
itself, and the raw line printed before it only confused that one line.
"""

from __future__ import annotations

import os

SPURIOUS = "Index __lance_mem_wal has no fields"
WRITER_MODULE = "lance::dataset::mem_wal::write"
_SPECIAL = set(r".^$*+?()[]{}|\/-")


def _not_starting_with(prefix: str) -> str:
    """A regex alternation matching any text that does not start with `prefix`."""
    head, rest = prefix[0], prefix[1:]
    char = "\\" + head if head in _SPECIAL else head
    longer = f"|{char}(?:{_not_starting_with(rest)})" if rest else ""
    return f"$|[^{char}]{longer}"


def lance_log_spec(level: str = "error") -> str:
    """The `LANCE_LOG` value: `level` for every module, minus the spurious message.

    The regex follows a `lance=` directive because pylance's Python side reads the
    first comma-separated entry without `=` as its own log level.
    """
    return f"{level},lance={level},{WRITER_MODULE}=off/^(?:{_not_starting_with(SPURIOUS)})"


def quiet_lance_log() -> None:
    """Set `LANCE_LOG` for this process and its children, unless the user chose one."""
    os.environ.setdefault("LANCE_LOG", lance_log_spec())
