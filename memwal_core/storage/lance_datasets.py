"""Lance datasets other than the table's own versions: flushed generations, a version a task opens.

They all open through one Lance session per process. The session holds the
object store clients, so an open reuses their connections; without it every
open built a client of its own, about 8 ms of CPU each (7.6 s of a
1,000-region merge round's 14 s on S3). Its caches are small and bounded: a
generation is read once, so caching it buys nothing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memwal_core.format.naming import GENERATION_KEY_PAGES
from memwal_core.storage.limits import with_lance_defaults

if TYPE_CHECKING:
    import lance
    from lance.lance import _Session

INDEX_CACHE_BYTES = 1 << 20
METADATA_CACHE_BYTES = 8 << 20


def load_lance_meanwhile() -> None:
    """Start importing Lance on a thread of its own, for a command that will open datasets after a phase
    of requests (a merge takes its leases first): its import (0.4 s of CPU: it loads pyarrow.dataset
    and pandas) then overlaps the waiting instead of following it."""
    if "lance" not in sys.modules:
        threading.Thread(target=_import_lance, name="memwal-lance-import", daemon=True).start()


def _import_lance() -> None:
    with contextlib.suppress(ImportError):  # the caller's own import raises it, where it is reported
        importlib.import_module("lance")


@functools.cache
def shared_session() -> _Session:
    """The process's session for datasets opened by URI (made on first use, so a forked worker makes its own)."""
    from lance.lance import _Session  # `lance.Session` is this class, re-exported out of type checkers' sight

    return _Session(index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES)


def open_dataset(
    uri: str, storage_options: Mapping[str, str] | None, *, version: int | None = None
) -> lance.LanceDataset:
    """A dataset by URI, with memwal's storage time limits, through the shared session."""
    import lance

    return lance.dataset(
        uri,
        version=version,
        storage_options=with_lance_defaults(storage_options or {}),
        session=shared_session(),
    )


def generation_key_bounds(uri: str, storage_options: Mapping[str, str] | None) -> tuple[Any, Any] | None:
    """The smallest and largest primary key of the flushed generation at `uri`, from its key-index
    sidecar (one small file); None when that cannot be read, so a caller keeps the generation."""
    import pyarrow.compute as pc
    from lance.file import LanceFileReader

    try:
        reader = LanceFileReader(
            f"{uri}/{GENERATION_KEY_PAGES}",
            with_lance_defaults(storage_options or {}),
            columns=["min", "max"],
        )
        pages = reader.read_all().to_table()
    except (OSError, ValueError, RuntimeError):
        return None
    smallest, largest = pc.min(pages.column("min")).as_py(), pc.max(pages.column("max")).as_py()
    return None if smallest is None or largest is None else (smallest, largest)
