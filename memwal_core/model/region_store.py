"""The region manifest protocol: read a version, find the latest, write the next.

Finding the latest never LISTs the manifest folder (object-store listings
are slow and only eventually consistent on some stores): read the best-effort
`version_hint.json`, then probe forward with HEAD requests. With a current
hint that is three requests per region: the hint, one HEAD, the manifest.

A caller that already knows a version (from the region snapshot, a sensor's
cursor or a listing it made) skips the hint: one HEAD and the manifest; one
HEAD alone when it also holds that version's manifest (versions never
change once written). A known version is only a hint: the HEAD verifies it.
If the next version exists, the known one is stale (a snapshot a week old,
and GC keeps a week of versions): probing goes on from the hint file when it
names a later version, two requests more. A known version that is gone falls
back to the hint file. A poller that has just seen the next version stored
takes a hint naming it or a later one as the newest (the hint and that
manifest): its next probe sees whatever the hint had not caught up with.

Past a stale start the probe gallops (start+1, +2, +4, ... until one is
missing) and bisects: O(log n) HEADs for n versions, never one per version,
so retained versions (and WAL entries, probed the same way) cost no read more
than a few requests. Versions are contiguous by protocol (GC deletes only the
oldest), which makes the bisection sound; the end it finds gets one more HEAD,
so a one-version gap there is reported rather than hiding later versions.
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


def probe_run_end(
    store: ObjectStore, path_of: Callable[[int], str], start: int, *, what: str, where: str
) -> int:
    """The last number of the unbroken run of objects `path_of(n)` after `start` (`start` if none).

    One HEAD when nothing follows `start`. Otherwise gallop (HEAD start+2, +4, +8, ... until
    one is missing), then bisect between the last present and the first missing: about
    2 log2(n) HEADs for a run of n, not n, sound because the numbers are contiguous by
    protocol (only the oldest are ever deleted).

    The end found gets one more HEAD, past the first missing number. A later object there
    is a gap that would hide it from every reader, Lance's included: CorruptMetadataError,
    unless the missing number exists when asked again (a live writer's N can land just
    after its absence was seen, and before its N+1 was). A gap the gallop jumps over hides
    nothing from this probe and is not looked for: that would cost a HEAD per number.
    """
    if not store.exists(path_of(start + 1)):
        return start
    present = start + 1
    while True:
        step = 1
        while store.exists(path_of(present + step)):
            present += step
            step *= 2
        missing = present + step
        while missing - present > 1:
            middle = (present + missing) // 2
            if store.exists(path_of(middle)):
                present = middle
            else:
                missing = middle
        if not store.exists(path_of(missing + 1)):
            return present
        if not store.exists(path_of(missing)):
            raise CorruptMetadataError(
                f"{what} {missing} is missing but later ones exist ({store.describe(where)})"
            )
        present = missing + 1


def run_start(stored: Callable[[int], bool], end: int, *, after: int = 0, guess: int | None = None) -> int:
    """The first number of the unbroken run of stored numbers that ends at or after `end` (stored).

    Numbers are deleted only oldest first (GC), so none below the run is stored: a bisection
    between `after` (not stored; 0 is never) and `end` finds its start in log2(end - after)
    calls of `stored` (a HEAD each), never a LIST. A right `guess` (the start GC recorded after
    its last run) costs two: it, stored, and the number before it, not; a wrong one narrows the
    bisection.
    """
    absent, present = after, end
    for probe in (guess, guess - 1) if guess is not None else ():
        if absent < probe < present:
            if stored(probe):
                present = probe
            else:
                absent = probe
    while present - absent > 1:
        middle = (absent + present) // 2
        if stored(middle):
            present = middle
        else:
            absent = middle
    return present


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

    def read_latest(
        self, known: int | RegionManifest | None = None, *, moved: bool = False, current: bool = False
    ) -> RegionManifest:
        """The newest manifest; NotFoundError if the region has none.

        `known`: a version believed to exist (or its manifest), checked with one HEAD of the
        next version instead of reading the hint. If that next version exists, `known` is
        stale (a region snapshot a week old, with a week of versions since): probing goes on
        from the hint when it names a later version, so a stale `known` costs the hint and
        one more HEAD, not one HEAD per version since. `moved`: the caller has just seen the
        version after `known` stored (a poller's probe): that HEAD is not made again, and a hint
        naming that version or a later one is taken as the newest, with no HEAD past it. Writers
        point the hint at each version just after storing it, so it lags only for that moment, and
        a poller reading a version behind the newest sees the rest at its next probe, which HEADs
        the version after the one it read: a changed region costs three requests, not four.
        `current`: the caller has just seen `known` to be the newest (a poller's probe moments
        ago) and takes it as it is: no HEAD, so a version written since is not seen; a `known`
        that is gone is read past as without `current`.
        """
        version = known.version if isinstance(known, RegionManifest) else known or 0
        if version >= 1:
            if moved:
                return self._read_from(self.read_hint(), stored=version + 1, hint_is_newest=True)
            if not current and self.store.exists(self.next_path(version)):
                return self._read_from(self.read_hint(), stored=version + 1)
            if isinstance(known, RegionManifest):
                return known
            with contextlib.suppress(NotFoundError):  # gone (GC) or never there: use the hint
                return self.read(version)
        return self._read_from(self.read_hint())

    def _read_from(
        self, hint: int | None, stored: int | None = None, *, hint_is_newest: bool = False
    ) -> RegionManifest:
        """The newest manifest, probing from the later of `hint` and `stored` (a version seen stored);
        `hint_is_newest`: a hint at or past `stored` is read with no probe past it."""
        start = max(hint or 1, stored or 1)
        trusted = hint_is_newest and hint is not None and hint >= (stored or 1)
        latest = start if trusted else self._probe_from(start)
        try:
            return self.read(latest)
        except NotFoundError:
            if hint is None or latest != hint or hint <= (stored or 0):
                raise NotFoundError(
                    f"region {self.region} has no manifest in {self.store.describe(self.dir)}"
                ) from None
        # A hint pointing at a missing version: fall back to probing from the version seen
        # stored, else from 1, or, once garbage collection has removed the oldest versions,
        # from the oldest one still stored (the only LIST on this path, and a rare one).
        oldest = stored or (1 if self.store.exists(self.path(1)) else self.oldest_version())
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
