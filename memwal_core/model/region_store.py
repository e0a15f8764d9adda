"""The region manifest protocol: read a version, find the latest, write the next.

Finding the latest never LISTs the manifest folder (object-store listings
are slow and only eventually consistent on some stores): read the best-effort
`version_hint.json`, then probe forward with HEAD requests, first one, then
growing parallel batches. With a current hint that is three requests per
region: the hint, one HEAD, the manifest.

A caller that already knows a version (from the region snapshot, a sensor's
cursor or a listing it made) skips the hint: one HEAD and the manifest; one
HEAD alone when it also holds that version's manifest (versions never
change once written). A known version is only a hint: the HEAD verifies it,
and a version that is gone falls back to the hint file.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable

from memwal_core.errors import CorruptMetadataError, NotFoundError, StorageError
from memwal_core.format.naming import (
    MEM_WAL_DIR,
    REGION_MANIFEST_DIR,
    REGION_MANIFEST_SUFFIX,
    U64_MAX,
    VERSION_HINT_FILE,
    parse_bitrev64,
    region_manifest_name,
)
from memwal_core.format.regions import RegionManifest
from memwal_core.storage.object_store import ObjectStore

log = logging.getLogger(__name__)

FIRST_PROBE_BATCH = 4
MAX_PROBE_BATCH = 64


def probe_run_end(
    store: ObjectStore, path_of: Callable[[int], str], start: int, *, what: str, where: str
) -> int:
    """The last number of the unbroken run of objects `path_of(n)` after `start` (`start` if none).

    Probes with HEAD requests, first one, then growing parallel batches.
    Raises CorruptMetadataError when a number is missing while a later one
    exists and stays missing when asked again: a gap hides the later objects
    from every reader, Lance's included. (Parallel HEADs can see a live
    writer's N+1 but not its N, written a moment apart; a second look tells
    that race from a real gap.)
    """
    if not store.exists(path_of(start + 1)):
        return start
    latest = start + 1
    batch = FIRST_PROBE_BATCH
    while True:
        candidates = list(range(latest + 1, latest + 1 + batch))
        found = store.exists_many([path_of(n) for n in candidates])
        if all(found):
            latest = candidates[-1]
            batch = min(batch * 2, MAX_PROBE_BATCH)
            continue
        first_missing = found.index(False)
        missing = candidates[first_missing]
        # The probe has already gone past a stale hint, so one more HEAD
        # is cheap insurance that the run really ends here.
        after = found[first_missing + 1 :] or [store.exists(path_of(missing + 1))]
        if not any(after):
            return missing - 1
        if not store.exists(path_of(missing)):
            raise CorruptMetadataError(
                f"{what} {missing} is missing but later ones exist ({store.describe(where)})"
            )
        latest = missing


class RegionManifestStore:
    """The manifest versions of one region."""

    def __init__(self, store: ObjectStore, region: str) -> None:
        self.store = store
        self.region = region
        self.dir = f"{MEM_WAL_DIR}/{region}/{REGION_MANIFEST_DIR}"

    def path(self, version: int) -> str:
        return f"{self.dir}/{region_manifest_name(version)}"

    def read(self, version: int) -> RegionManifest:
        """Region manifest `version`; NotFoundError if it does not exist."""
        path = self.path(version)
        data = self.store.read(path)
        return RegionManifest.decode(
            data, where=self.store.describe(path), region=self.region, version=version
        )

    def read_hint(self) -> int | None:
        """The version named by `version_hint.json`, or None when absent or unreadable."""
        try:
            raw = self.store.read(f"{self.dir}/{VERSION_HINT_FILE}")
            version = json.loads(raw)["version"]
        except (NotFoundError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(version, int) or not 1 <= version < U64_MAX:
            # Probing past it would name no file: read the region as if it had no hint.
            log.warning(
                "%s names version %r, not a manifest version; ignored",
                self.store.describe(f"{self.dir}/{VERSION_HINT_FILE}"),
                version,
            )
            return None
        return version

    def _probe_from(self, version: int) -> int:
        """The last version of the unbroken run that starts after `version`."""
        return probe_run_end(
            self.store, self.path, version, what=f"region {self.region} manifest version", where=self.dir
        )

    def next_path(self, version: int) -> str:
        """The version after `version`: if it does not exist, `version` is still the latest.

        GC never deletes the latest version, so a missing next one proves it (one HEAD).
        """
        return self.path(version + 1)

    def read_latest(self, known: int | RegionManifest | None = None) -> RegionManifest:
        """The newest manifest; NotFoundError if the region has none.

        `known`: a version believed to exist (or its manifest), where probing starts instead of the hint.
        """
        if known is not None:
            version = known if isinstance(known, int) else known.version
            if version >= 1:
                latest = self._probe_from(version)
                if latest == version and isinstance(known, RegionManifest):
                    return known
                with contextlib.suppress(NotFoundError):  # gone (GC) or never there: use the hint
                    return self.read(latest)
        hint = self.read_hint()
        start = hint if hint is not None else 1
        latest = self._probe_from(start)
        try:
            return self.read(latest)
        except NotFoundError:
            if hint is None or latest != start:
                raise NotFoundError(
                    f"region {self.region} has no manifest in {self.store.describe(self.dir)}"
                ) from None
        # A hint pointing at a missing version: fall back to probing from 1, or,
        # once garbage collection has removed the oldest versions, from the
        # oldest one still stored (the only LIST on this path, and a rare one).
        oldest = 1 if self.store.exists(self.path(1)) else self.oldest_version()
        if oldest is None:
            raise NotFoundError(f"region {self.region} has no manifest in {self.store.describe(self.dir)}")
        latest = self._probe_from(oldest)
        self.check_hint(hint, latest)
        return self.read(latest)

    def check_hint(self, hint: int | None, latest: int) -> None:
        """Refuse a region whose hint (read before `latest` was found) names a later version.

        Writers store a version before they point the hint at it, so a hint read
        first can only name a version that was stored by then; if the newest
        found is older, that version was deleted.
        """
        if hint is not None and latest < hint:
            # Writers store a version before pointing the hint at it: the newest manifest is gone,
            # and reading an older one would silently lose what it recorded.
            raise CorruptMetadataError(
                f"region {self.region}: its version hint names manifest version {hint}, but the newest "
                f"stored is {latest} ({self.store.describe(self.dir)}); the newest manifest was deleted"
            )

    def stored_versions(self) -> dict[int, float]:
        """Every stored version and its creation time (one LIST); for GC and recovery, not reads."""
        versions: dict[int, float] = {}
        for info in self.store.list_files(self.dir):
            name = info.path.rsplit("/", 1)[-1]
            if name.endswith(REGION_MANIFEST_SUFFIX):
                versions[parse_bitrev64(name[: -len(REGION_MANIFEST_SUFFIX)])] = info.mtime
        return versions

    def oldest_version(self) -> int | None:
        """The oldest stored version, or None if the region has none."""
        return min(self.stored_versions(), default=None)

    def write_hint(self, version: int) -> None:
        """Point `version_hint.json` at `version` (best effort: readers probe past a stale hint)."""
        hint = json.dumps({"version": version}, separators=(",", ":")).encode()
        with contextlib.suppress(StorageError):
            self.store.write(f"{self.dir}/{VERSION_HINT_FILE}", hint)

    def create_first(self, message_bytes: bytes) -> None:
        """Write version 1 of a new region if nobody else has; then point the hint at it.

        Raises AlreadyExistsError when the region already has a version 1.
        """
        self.store.put_if_not_exists(self.path(1), message_bytes)
        self.write_hint(1)

    def write_next(self, current: RegionManifest, message_bytes: bytes) -> None:
        """Write version `current.version + 1` if nobody else has; then update the hint.

        Raises AlreadyExistsError when another writer took that version: the
        caller re-reads and re-applies its change. The hint is best effort.
        """
        version = current.version + 1
        self.store.put_if_not_exists(self.path(version), message_bytes)
        self.write_hint(version)
