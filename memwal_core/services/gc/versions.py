"""A region's stored manifest versions as GC reads them: by their two ends, never by a listing.

GC keeps every version for the fence retention (a week: ~15,000 per region at a flush every
40 s), so listing them cost one LIST page per 1,000 on S3 and one stat each on local disk, on
every run. They need not be listed: the stored versions are one unbroken run [oldest, latest],
since each is written (put-if-not-exists) only once the one before exists, and GC deletes only
the oldest, one at a time. The latest is found as every reader finds it (the hint, then HEADs);
the oldest by HEADs (`run_start`), from the one GC recorded after its last run
(`_memwal_hints/oldest_manifest_versions.json`: two HEADs) or, without a record, by bisection.
What GC needs of the versions between, it reads one at a time: a manifest (GET) or a creation
time (HEAD), each at most once per plan. On S3 the page GC reads for its generation directories
holds an evenly spaced sample of the versions (`RegionListing`), or all of them when there are
fewer than a page: their times cost nothing, and both searches start within one step of the answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from memwal_core.format.naming import OLDEST_MANIFESTS_FILE
from memwal_core.format.regions import RegionManifest
from memwal_core.model.region_store import RegionManifestStore, run_start
from memwal_core.services.gc.records import read_record, write_record
from memwal_core.storage.object_store import ObjectInfo, ObjectStore


class StoredVersions:
    """The stored manifest versions of a region, [oldest, latest]; each read and HEAD made once."""

    def __init__(
        self,
        manifests: RegionManifestStore,
        latest: RegionManifest,
        recorded: int | None,
        listed: Mapping[int, ObjectInfo] | None = None,
        every: int | None = None,
    ) -> None:
        """`recorded`: the oldest version GC recorded for the region (verified here); without one,
        version 1 is tried first (a region GC never trimmed). `listed`: versions a listing read
        before `latest` was read, among them every stored multiple of `every` (their times cost
        no HEAD, and they bound the searches)."""
        self.manifests = manifests
        self.latest = latest
        self._read: dict[int, RegionManifest] = {latest.version: latest}
        self._heads: dict[int, ObjectInfo | None] = dict(listed or {})
        self.listed = sorted(listed or ())
        guess = recorded or 1
        if self.listed and every is not None:
            # The multiple of `every` below the oldest listed is not stored, or it would be listed.
            first = self.listed[0]
            self.oldest = run_start(self.stored, first, after=(first - 1) // every * every, guess=guess)
        else:
            self.oldest = run_start(self.stored, latest.version, guess=guess)

    @property
    def versions(self) -> range:
        return range(self.oldest, self.latest.version + 1)

    def read(self, version: int) -> RegionManifest:
        """Manifest `version` (NotFoundError if it is gone)."""
        if version not in self._read:
            self._read[version] = self.manifests.read(version)
        return self._read[version]

    def head(self, version: int) -> ObjectInfo | None:
        if version not in self._heads:
            self._heads[version] = self.manifests.store.head(self.manifests.path(version))
        return self._heads[version]

    def sizes_seen(self) -> list[int]:
        """The sizes of the versions seen so far (the latest, those listed or HEADed): never empty."""
        seen = {v: info.size for v, info in self._heads.items() if info is not None}
        seen[self.latest.version] = len(self.latest.raw)
        return list(seen.values())

    def stored(self, version: int) -> bool:
        return self.head(version) is not None

    def created(self, version: int) -> float | None:
        """When `version` was written (its stored time), or None if it is gone."""
        info = self.head(version)
        return info.mtime if info is not None else None


def read_oldest(store: ObjectStore) -> dict[str, int]:
    """The oldest manifest version of each region as GC last recorded it (none: every region is searched)."""
    return {
        region: version
        for region, version in read_record(store, OLDEST_MANIFESTS_FILE).items()
        if type(version) is int and version >= 1
    }


def write_oldest(store: ObjectStore, oldest: Mapping[str, int]) -> None:
    write_record(store, OLDEST_MANIFESTS_FILE, oldest, "the oldest manifest version of each region")
