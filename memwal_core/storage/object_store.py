"""One object-store interface over local files and S3.

Everything memwal reads or writes outside Lance's own calls goes through
here: region manifests, WAL entries, table manifests. The two operations the
MemWAL protocol depends on are `put_if_not_exists` (atomic: exactly one of
many racing writers wins, and no reader ever sees a partial object) and
`exists` (a HEAD, so reading the latest region manifest never LISTs).
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from memwal_core.storage.retry import ThrottleClock

T = TypeVar("T")
_POOL_PREFIX = "memwal-io"
# How long a new pool's threads wait for each other to start (a limit on threads only breaks the wait).
_START_SECONDS = 10.0
R = TypeVar("R")


class _SharedPools:
    """The process's I/O thread pools, one per size, shared by every store.

    A store per table each growing its own pool to its full size left a process
    watching many tables (the location's sensors) starting threads on every tick:
    each pool grows only when no thread is idle at a submit. One pool per size
    bounds the process's I/O threads by the largest `max_concurrent_requests`
    in use. A forked child starts with none: its parent's threads do not exist there.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._pools = {}

    def get(self, size: int, *, start_threads: bool = False) -> ThreadPoolExecutor:
        """The pool of `size` threads; `start_threads`: a new pool starts them all at once.

        A pool otherwise grows by one thread per submit that finds none idle, and that submit
        waits for the thread to run: behind threads busy with their tasks, up to the GIL's
        switch interval (5 ms) each, 0.1-0.2 s of a 1,000-region command's main thread.
        Started before any task, each takes microseconds.
        """
        with self._lock:
            pool = self._pools.get(size)
            if pool is not None:
                return pool
            pool = self._pools[size] = ThreadPoolExecutor(size, thread_name_prefix=f"{_POOL_PREFIX}-{size}")
        if start_threads:
            # Every thread's first task waits for all of them, so each submit finds none idle.
            gate = threading.Barrier(size)
            for _ in range(size):
                pool.submit(gate.wait, _START_SECONDS)
        return pool


_POOLS = _SharedPools()
os.register_at_fork(after_in_child=_POOLS.after_fork_in_child)


def start_io_threads(size: int) -> None:
    """Start the threads of the process's I/O pool of `size` now, before a command's first phase needs them."""
    _POOLS.get(size, start_threads=True)


def map_waiting(fn: Callable[[T], R], items: Sequence[T], size: int) -> list[R]:
    """Apply `fn` to items on the process's I/O pool of `size` threads, keeping their order: for tasks
    that mostly wait on storage. Its threads are started once per process, not once per call (a
    round's 64 thread starts took 0.1 s of its main thread).

    A call from one of the pool's own threads (e.g. a HEAD probe inside a
    per-region task) runs in that thread: waiting on the same pool from
    inside it deadlocks once every thread waits.
    """
    if len(items) <= 1 or threading.current_thread().name.startswith(_POOL_PREFIX):
        return [fn(item) for item in items]
    return list(_POOLS.get(size).map(fn, items))


@contextmanager
def side_call(call: Callable[[], T]) -> Iterator[Future[T]]:
    """Run `call` on a thread of its own while the body runs (its future; left only once it is done):
    two waits on storage that do not depend on each other overlap instead of adding up."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memwal-side") as side:
        yield side.submit(call)


@dataclass(frozen=True)
class ObjectInfo:
    """A stored object: its path relative to the store root, size and modification time."""

    path: str
    size: int
    mtime: float


# The kinds of S3 request (what S3 bills per request), and the kind of each operation the stores count
# (`RequestStats.add`): the one mapping from operation names to request kinds.
REQUEST_KINDS = ("HEAD", "GET", "PUT", "LIST", "DELETE")
OPERATION_KINDS: Mapping[str, str] = {
    "head": "HEAD",
    "get": "GET",
    "put": "PUT",
    "put_if_not_exists": "PUT",
    "list": "LIST",
    "delete": "DELETE",
    "delete_many": "DELETE",  # one DeleteObjects request (a POST) per batch of up to 1,000 keys
}


def by_kind(operations: Mapping[str, int]) -> dict[str, int]:
    """Counts by operation (`RequestStats.snapshot`) as counts by request kind, every kind present."""
    kinds = dict.fromkeys(REQUEST_KINDS, 0)
    for operation, n in operations.items():
        kinds[OPERATION_KINDS[operation]] += n
    return kinds


class RequestStats:
    """Thread-safe count of storage requests by operation, for benchmarks and metrics.

    `reset` starts a new count (a service's run, a monitoring read); `lifetime` keeps counting
    through resets, for a reader that keeps its store open (the exporter's requests).
    `throttling` counts the store's "slow down" answers and the time requests waited on them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._lifetime: Counter[str] = Counter()
        self.throttling = ThrottleClock()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n
            self._lifetime[kind] += n

    def lifetime(self) -> dict[str, int]:
        """Every request since the store was made, resets notwithstanding."""
        with self._lock:
            return dict(self._lifetime)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
        self.throttling.reset()


class ObjectStore(ABC):
    """Objects under one root (a table directory), addressed by relative '/'-paths."""

    def __init__(self, uri: str, *, parallelism: int) -> None:
        self.uri = uri.rstrip("/")
        self.stats = RequestStats()
        self.parallelism = parallelism

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Apply `fn` to items concurrently (I/O-bound), keeping their order (`map_waiting`)."""
        return map_waiting(fn, items, self.parallelism)

    def exists_many(self, paths: Sequence[str]) -> list[bool]:
        """Existence of many objects, probed in parallel."""
        return self.map(self.exists, paths)

    def describe(self, path: str) -> str:
        """The full URI of `path`, for messages."""
        return f"{self.uri}/{path}" if path else self.uri

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The object's bytes; NotFoundError if absent."""

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace the object."""

    @abstractmethod
    def put_if_not_exists(self, path: str, data: bytes) -> None:
        """Create the object atomically; AlreadyExistsError if it exists."""

    @abstractmethod
    def head(self, path: str) -> ObjectInfo | None:
        """The object's size and mtime, or None if absent."""

    def check_reachable(self) -> None:
        """One cheap request, so a dead or silent endpoint fails the command within its time limits.

        Without it, the first request would be Lance's, which retries for minutes.
        """
        self.is_dir("")

    def exists(self, path: str) -> bool:
        """Whether the object exists (one HEAD request)."""
        return self.head(path) is not None

    @abstractmethod
    def is_dir(self, path: str) -> bool:
        """Whether anything is stored below `path/`."""

    # Whether a directory can outlive its last object (local disk; never on S3): then a listing of
    # objects misses it, and who deletes directories must also ask `list_dirs`.
    keeps_empty_dirs = False
    # Whether Lance writes a WAL entry here through a temp file and a rename (local disk), which a
    # writer killed mid-put leaves behind; on object stores it puts conditionally, in one request.
    lance_puts_through_temp_files = False
    # Whether a listing costs next to nothing (local disk) but is no atomic snapshot: names deleted while
    # it runs drop out, so a listing of records being pruned can come back empty (see `Lease`).
    lists_cheaply = False

    @abstractmethod
    def list_dirs(self, path: str) -> list[str]:
        """Names of the immediate sub-directories of `path`, sorted."""

    @abstractmethod
    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None, enough: str | None = None
    ) -> list[ObjectInfo]:
        """Objects below `path` (immediate children unless `recursive`), sorted by path.

        `before`: only objects whose path sorts before it; a listing stops there, so the objects
        after it cost no requests (a region's WAL sorts after its manifests and generations).
        `enough` (before `before`): the listing may stop once it gets there, on S3 at the end of
        the page that does (its objects past `enough` come too: they cost nothing more), on local
        disk right there. Only the objects before `enough` are then sure to be all listed.
        """

    def list_names(self, path: str) -> list[str]:
        """Names of the objects directly in `path` (temp files included), unsorted, without their sizes
        and times: where those cost a request each (a stat on local disk), listing names costs none."""
        return [info.path.rsplit("/", 1)[-1] for info in self.list_files(path)]

    def first_files(self, path: str) -> list[ObjectInfo]:
        """The immediate children of `path` that sort first, sorted: one request's worth.

        All of them where listing costs no request (local disk); S3 overrides it with one page.
        """
        return self.list_files(path)

    def temporary_files(self, path: str) -> list[ObjectInfo]:
        """Temp files a write of this store left below `path` (none: object stores put atomically)."""
        return []

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one object; deleting an absent object is not an error."""

    def delete_many(self, paths: Sequence[str]) -> None:
        """Delete many objects (absent ones are not an error); stores with batch deletes override this."""
        self.map(self.delete, paths)

    def delete_tree(self, path: str) -> list[ObjectInfo]:
        """Delete every object below `path/`; the objects deleted (GC reports their count and bytes).

        Re-running finishes a partial delete.
        """
        return self.delete_trees([path])[0]

    def delete_trees(self, paths: Sequence[str]) -> list[list[ObjectInfo]]:
        """Delete every object below each of `paths`, in as few batch deletes as the store allows."""
        found = [self.list_files(path, recursive=True) for path in paths]
        self.delete_many([info.path for tree in found for info in tree])
        return found


def join_path(*parts: str) -> str:
    """Join path parts with single slashes."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def absolute_uri(uri: str) -> str:
    """`uri` with a local path made absolute, so another process (a Spark executor) finds it too."""
    if "://" in uri:
        return uri
    return str(Path(uri).expanduser().absolute())
