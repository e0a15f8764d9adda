"""The table facade: one MemWAL table, opened from a URI and storage options.

Every service and CLI command starts here. It owns the object store, opens
the Lance dataset, and reads the two sources of MemWAL state: the MemWAL
index details in the table manifest (merge progress, index catch-up) and the
region manifests under `_mem_wal/`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from memwal_core.arguments import checked
from memwal_core.errors import (
    CorruptMetadataError,
    MemWalNotEnabledError,
    NotFoundError,
    NotLanceTableError,
    StorageError,
    first_line,
)
from memwal_core.format.index_details import IndexDetails, read_index_details
from memwal_core.format.naming import (
    MEM_WAL_DIR,
    TABLE_VERSIONS_DIR,
    generation_from_dir_name,
    table_manifest_name,
    table_manifest_version,
)
from memwal_core.format.primary_key import primary_key_from
from memwal_core.format.regions import RegionManifest
from memwal_core.lance_errors import OpenFailure, named_manifest, open_failure
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import normalize_uri, open_store

if TYPE_CHECKING:
    import lance
    import pyarrow as pa
    from lance.lance import _Session as Session

# Lance's caches, shared by every version a table object opens. Lance's defaults (6 GiB of index
# pages, 1 GiB of metadata) are per dataset, and a merge's delete through the key index caches
# BTree pages in step with the base: 490 MiB peak at 20M base rows with them, 340 MiB with these.
# Each version a merge commits leaves about 280 KiB of metadata no later commit reads (measured
# over 20 commits of a growing base), so that cache stays small: a 40M-row backlog merged in 100
# commits peaked at 338 MiB with 32 MiB of it, 315 MiB with 8 (500k rows merged whole: 280).
INDEX_CACHE_BYTES = 32 << 20
METADATA_CACHE_BYTES = 8 << 20
# Table versions whose MemWAL details a table object keeps (a command reads two or three).
DETAILS_KEPT = 8


def primary_key_of(schema: pa.Schema) -> list[str]:
    """The table's unenforced primary key columns, in key order."""
    return primary_key_from((f.name, f.metadata or {}) for f in schema)


def _is_region_id(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


class MemWalTable:
    """A Lance table with MemWAL, at its latest version unless one is given."""

    @checked
    def __init__(
        self, uri: str, storage_options: StorageOptions | Mapping[str, object] | None = None
    ) -> None:
        self.uri = normalize_uri(uri)
        self.storage_options = (
            storage_options
            if isinstance(storage_options, StorageOptions)
            else StorageOptions(storage_options or {})
        )
        self.store: ObjectStore = open_store(self.uri, self.storage_options)
        # A version's manifest is written once and never changed: its details are read once (the
        # latest few versions: a sensor's table lives as long as its code server).
        self._details: dict[int, IndexDetails] = {}
        self._details_lock = threading.Lock()

    @classmethod
    def open(
        cls, uri: str, storage_options: StorageOptions | Mapping[str, object] | None = None
    ) -> MemWalTable:
        """Open a table and check that it is a Lance table with MemWAL enabled."""
        table = cls(uri, storage_options)
        table.store.check_reachable()
        table.index_details()
        return table

    # -- Lance dataset ---------------------------------------------------

    @cached_property
    def session(self) -> Session:
        """Lance's caches for this table: bounded, and shared by the versions it opens (one per commit)."""
        # `lance.Session` is this class; its re-export is not visible to type checkers.
        from lance.lance import _Session

        return _Session(
            index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES
        )

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """The Lance dataset (latest version, or `version`), with errors named after the table."""
        import lance

        try:
            return lance.dataset(
                self.uri,
                version=version,
                storage_options=self.storage_options.as_dict() or None,
                session=self.session,
            )
        except (ValueError, OSError) as exc:
            raise self._classify_open_error(exc, version) from exc

    def _classify_open_error(self, exc: Exception, version: int | None) -> Exception:
        failure = open_failure(exc)
        reached = failure in (OpenFailure.NOT_FOUND, OpenFailure.UNREADABLE)
        if reached and self.store.exists("") and not self.store.is_dir(""):  # a regular file, /dev/null
            return NotLanceTableError(f"{self.uri} is not a Lance table (a file, not a directory)")
        if failure is OpenFailure.NOT_FOUND:
            if version is not None and self.store.is_dir(TABLE_VERSIONS_DIR):
                return NotFoundError(f"table {self.uri} has no version {version}")
            if self.store.is_dir(TABLE_VERSIONS_DIR):
                return CorruptMetadataError(
                    f"table {self.uri} has no readable manifest in {TABLE_VERSIONS_DIR}/"
                )
            if self.store.is_dir(""):
                return NotLanceTableError(
                    f"{self.uri} is not a Lance table (no {TABLE_VERSIONS_DIR}/ directory)"
                )
            return NotFoundError(f"table {self.uri} does not exist")
        if failure is OpenFailure.NO_ANSWER:
            return StorageError(f"storage did not answer for table {self.uri}: {first_line(exc)}")
        if failure is OpenFailure.UNREACHABLE:
            return StorageError(f"cannot reach the storage of table {self.uri}: {first_line(exc)}")
        manifest = named_manifest(exc) or self._manifest_opened(version)
        what = (
            f"its manifest {self.store.describe(manifest)} cannot be read" if manifest else "cannot be opened"
        )
        return CorruptMetadataError(f"table {self.uri}: {what} ({first_line(exc)})")

    def _manifest_opened(self, version: int | None) -> str | None:
        """The table manifest Lance opens for `version` (default: the newest stored), if any."""
        if version is None:
            version = self._newest_listed()
            if version is None:
                return None
        return f"{TABLE_VERSIONS_DIR}/{table_manifest_name(version)}"

    def _newest_listed(self) -> int | None:
        """The newest version whose manifest the first page of `_versions/` lists (Lance's V2 names
        count down, so the newest sorts first); None if it lists none."""
        names = (info.path.rsplit("/", 1)[-1] for info in self.store.first_files(TABLE_VERSIONS_DIR))
        return max((v for v in map(table_manifest_version, names) if v is not None), default=None)

    def latest_version(self) -> int:
        """The newest table version, found as Lance finds it (one LIST) without loading Lance: reading
        status starts in a tenth of the time. A table with no manifest listed is opened in Lance,
        whose error names what is wrong (no table, not a Lance table, unreadable)."""
        try:
            version = self._newest_listed()
        except StorageError:  # e.g. the table path is a file: Lance's open says so
            version = None
        return self.dataset().version if version is None else version

    def version_after(self, known: int | None) -> int:
        """The newest table version, given `known`, one that was the newest: one HEAD while no later
        version exists, else the listing `latest_version` reads. Lance writes version v+1 only on top
        of v, with a put that never overwrites, and never deletes the newest; its detached versions
        have other names (`d{n}.manifest`)."""
        if known is not None and not self.store.exists(
            f"{TABLE_VERSIONS_DIR}/{table_manifest_name(known + 1)}"
        ):
            return known
        return self.latest_version()

    def version_numbers(self, dataset: lance.LanceDataset | None = None) -> list[int]:
        """Every stored version of the base table, ascending; Lance reads each one's manifest to list it."""
        try:
            return sorted(
                int(v["version"]) for v in (dataset if dataset is not None else self.dataset()).versions()
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise self._classify_open_error(exc, None) from exc

    @cached_property
    def latest(self) -> lance.LanceDataset:
        """The dataset as first opened; services re-open to see newer versions."""
        return self.dataset()

    @property
    def schema(self) -> pa.Schema:
        return self.latest.schema

    @cached_property
    def primary_key(self) -> list[str]:
        """The primary key columns; MemWAL merges need at least one."""
        return primary_key_of(self.schema)

    # -- MemWAL index details ------------------------------------------

    def index_details(self, version: int | None = None) -> IndexDetails:
        """MemWAL index details at `version` (default: the latest version)."""
        if version is None:
            version = self.latest_version()
        with self._details_lock:
            cached = self._details.get(version)
        if cached is not None:
            return cached
        path = f"{TABLE_VERSIONS_DIR}/{table_manifest_name(version)}"
        try:
            data = self.store.read(path)
        except NotFoundError:
            raise NotFoundError(f"table {self.uri} has no manifest for version {version}") from None
        details = read_index_details(data, where=self.store.describe(path))
        if details is None:
            raise MemWalNotEnabledError(f"table {self.uri} does not have MemWAL enabled (version {version})")
        with self._details_lock:
            if len(self._details) >= DETAILS_KEPT:
                del self._details[min(self._details)]
            self._details[version] = details
        return details

    # -- Regions ---------------------------------------------------------

    def region_ids(self) -> list[str]:
        """Ids of the regions that have a directory under `_mem_wal/`, sorted."""
        return [name for name in self.store.list_dirs(MEM_WAL_DIR) if _is_region_id(name)]

    def region_store(self, region: str) -> RegionManifestStore:
        return RegionManifestStore(self.store, region)

    def read_region(
        self,
        region: str,
        known: int | RegionManifest | None = None,
        *,
        moved: bool = False,
        current: bool = False,
    ) -> RegionManifest | None:
        """The region's latest manifest; None for a region with no manifest yet.

        `known`, `moved`, `current`: a version believed current, or its manifest, whether the version
        after it was just seen stored, and whether it was just seen the newest (see
        `RegionManifestStore.read_latest`).

        A region with flushed generations but no manifest is corrupt, not new:
        its writer claimed it (manifest version 1) before its first flush.
        """
        try:
            return self.region_store(region).read_latest(known, moved=moved, current=current)
        except NotFoundError:
            generations = [
                d
                for d in self.store.list_dirs(f"{MEM_WAL_DIR}/{region}")
                if generation_from_dir_name(d) is not None
            ]
            if generations:
                raise CorruptMetadataError(
                    f"region {region} has flushed generations ({generations[0]}, ...) but no manifest in "
                    f"{self.store.describe(f'{MEM_WAL_DIR}/{region}/manifest')}"
                ) from None
            return None

    def read_regions(
        self,
        regions: Iterable[str] | None = None,
        known: Mapping[str, int | RegionManifest] | None = None,
    ) -> dict[str, RegionManifest | None]:
        """Latest manifest of each region (None for a region with no manifest yet), in parallel.

        `known`: per region, a version believed current or its manifest (hints, verified).
        """
        ids = list(regions) if regions is not None else self.region_ids()
        hints = known or {}
        found = self.store.map(lambda region: self.read_region(region, hints.get(region)), ids)
        return dict(zip(ids, found, strict=True))

    def close(self) -> None:
        """Drop this table's caches (Lance's session, the dataset first opened, the details read); they
        fill again if used.

        The store holds nothing to release: its I/O threads are the process's, shared (object_store._SharedPools).
        """
        for cached in ("session", "latest"):
            self.__dict__.pop(cached, None)
        with self._details_lock:
            self._details.clear()

    def __enter__(self) -> MemWalTable:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
