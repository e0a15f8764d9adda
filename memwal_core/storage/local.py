"""Objects in a directory on the local file system."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.object_store import ObjectInfo, ObjectStore

T = TypeVar("T")
# The temp file `_stage` writes before renaming or linking it into place.
_TEMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
# Local requests have no latency to hide: threads beyond this only contend for the GIL.
LOCAL_PARALLELISM = 16


class LocalStore(ObjectStore):
    """A directory on the local file system."""

    def __init__(self, root: Path, *, parallelism: int = LOCAL_PARALLELISM) -> None:
        super().__init__(str(root), parallelism=parallelism)
        self.root = root

    def _path(self, path: str) -> Path:
        return self.root / path if path else self.root

    def _io(self, kind: str, path: str, call: Callable[[], T]) -> T:
        self.stats.add(kind)
        try:
            return call()
        except FileNotFoundError as exc:
            raise NotFoundError(f"{self.describe(path)} does not exist") from exc
        except FileExistsError:
            raise
        except OSError as exc:
            raise StorageError(f"{kind} of {self.describe(path)} failed: {exc.strerror}") from exc

    def read(self, path: str) -> bytes:
        return self._io("get", path, self._path(path).read_bytes)

    def _stage(self, path: str, data: bytes) -> tuple[Path, Path]:
        """Write `data` to a private temp file beside `path`; return (temp, target).

        A failed write (a full disk) removes its temp file: nothing else would.
        """
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        return tmp, target

    def write(self, path: str, data: bytes) -> None:
        def call() -> None:
            tmp, target = self._stage(path, data)
            os.replace(tmp, target)

        self._io("put", path, call)

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        # Write a private temp file, then hard-link it into place: link() fails
        # if the name exists, so exactly one racer wins and no reader sees a
        # half-written file.
        def call() -> None:
            tmp, target = self._stage(path, data)
            try:
                os.link(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)

        try:
            self._io("put_if_not_exists", path, call)
        except FileExistsError as exc:
            raise AlreadyExistsError(f"{self.describe(path)} already exists") from exc

    def head(self, path: str) -> ObjectInfo | None:
        def stat() -> os.stat_result | None:
            # A miss is the common answer (the probe past a region's latest version): no error
            # object for it, whose message redaction cost more than the stat.
            try:
                return self._path(path).stat()
            except FileNotFoundError:
                return None

        st = self._io("head", path, stat)
        return ObjectInfo(path, st.st_size, st.st_mtime) if st is not None else None

    def exists_many(self, paths: Sequence[str]) -> list[bool]:
        """In this thread: a stat takes microseconds, less than handing it to a pool thread
        (a sensor tick probing 800 regions spent half its CPU on the hand-offs)."""
        return [self.exists(path) for path in paths]

    def is_dir(self, path: str) -> bool:
        self.stats.add("head")
        return self._path(path).is_dir()

    def list_dirs(self, path: str) -> list[str]:
        def call() -> list[str]:
            try:
                entries = list(os.scandir(self._path(path)))
            except FileNotFoundError:  # no such directory: nothing below it
                return []
            return sorted(e.name for e in entries if e.is_dir())

        return self._io("list", path, call)

    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None, enough: str | None = None
    ) -> list[ObjectInfo]:
        base = self._path(path)
        before = enough or before  # each object listed costs a stat here: none past `enough` is read

        def call() -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            walker = _walk(base) if recursive else [(str(base), [], _names(base))]
            for dirpath, dirs, files in walker:
                if before is not None:
                    # Every path in a directory starts with its path and a slash (`r/wal/...` sorts after
                    # `r/wal`): one at or after `before` is not walked, nor its entries read.
                    dirs[:] = [
                        d
                        for d in dirs
                        if f"{(Path(dirpath) / d).relative_to(self.root).as_posix()}/" < before
                    ]
                for name in files:
                    full = Path(dirpath) / name
                    rel = full.relative_to(self.root).as_posix()
                    if name.endswith(".tmp") or (before is not None and rel >= before):
                        continue
                    st = _stat_file(full)
                    if st is not None:
                        found.append(ObjectInfo(rel, st.st_size, st.st_mtime))
            return sorted(found, key=lambda info: info.path)

        return self._io("list", path, call)

    def list_names(self, path: str) -> list[str]:
        """One directory read: no stat per file (a region's WAL folder holds a week of entries)."""

        def call() -> list[str]:
            try:
                with os.scandir(self._path(path)) as entries:
                    # `is_file` answers from the directory entry's type: no stat on Linux file systems.
                    return [e.name for e in entries if e.is_file()]
            except FileNotFoundError:  # no such directory: nothing in it
                return []

        return self._io("list", path, call)

    def temporary_files(self, path: str) -> list[ObjectInfo]:
        """This store's own temp files (`.NAME.HEX.tmp`) below `path`, which `list_files` hides."""

        def call() -> list[ObjectInfo]:
            found = []
            for dirpath, _dirs, files in _walk(self._path(path)):
                for name in files:
                    full = Path(dirpath) / name
                    st = _stat_file(full) if _TEMP.match(name) else None
                    if st is not None:
                        found.append(
                            ObjectInfo(full.relative_to(self.root).as_posix(), st.st_size, st.st_mtime)
                        )
            return sorted(found, key=lambda info: info.path)

        return self._io("list", path, call)

    def delete(self, path: str) -> None:
        self._io("delete", path, lambda: self._path(path).unlink(missing_ok=True))

    keeps_empty_dirs = True
    lance_puts_through_temp_files = True
    lists_cheaply = True

    def delete_trees(self, paths: Sequence[str]) -> list[list[ObjectInfo]]:
        deleted = super().delete_trees(paths)
        # Directories are not objects: drop the emptied ones, or listings would still show them.
        for path in paths:
            for dirpath, _dirs, _files in os.walk(self._path(path), topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        return deleted


def _names(directory: Path) -> list[str]:
    """The names in `directory`; none if it does not exist. Only the directory's own absence reads as
    empty: any other error, or a file missing later in a listing, fails the listing instead (an
    empty listing read for a failed one once let a lease be taken twice: `_stat_file`)."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _walk(top: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk`, which drops a subdirectory deleted while it walks (it is gone) but, unlike
    `os.walk`'s default, fails on any other error instead of leaving the subdirectory out."""

    def failed(exc: OSError) -> None:
        if not isinstance(exc, FileNotFoundError):
            raise exc

    return os.walk(top, onerror=failed)


def _stat_file(path: Path) -> os.stat_result | None:
    """A listed file's size and time; None if it is not a regular file or was deleted since it was listed.

    A name another process deletes between the directory read and this stat (a lease record pruned by
    its next holder) must drop out of the listing, not fail it: a failed listing read as an empty one
    once let a lease be taken at record 1 while its holder held record 203 (two holders at once).
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None
