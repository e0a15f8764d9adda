"""GC plans: per region, which generations to prune from the manifest, which directories,
WAL entries and manifest versions to delete, and why everything else is kept.

A plan is frozen and picklable, read at one table version and one instant
(`planned_at`), so a dry run prints exactly what a real run would do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from memwal_core.errors import MemwalError, MemWalNotEnabledError, NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import (
    LEASE_DIR,
    MEM_WAL_DIR,
    REGION_MANIFEST_DIR,
    REGION_MANIFEST_SUFFIX,
    REGION_WAL_DIR,
    STAGING_DIR,
    VERSION_HINT_FILE,
    generation_from_dir_name,
    parse_bitrev64,
)
from memwal_core.format.regions import RegionManifest
from memwal_core.model.indexes import read_maintained
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.records import record_after
from memwal_core.services.gc.retention import anchor_version, plan_retention, read_wal_deleted
from memwal_core.services.gc.rules import (
    FLUSH_IN_PROGRESS,
    GRACE_PERIOD,
    GcPolicy,
    RegionBounds,
    region_bounds,
)
from memwal_core.services.gc.stored import RegionStored
from memwal_core.services.gc.versions import StoredVersions, read_oldest
from memwal_core.services.gc.wal_temps import WalTempScan, read_dues, scan_due
from memwal_core.services.result import Failure
from memwal_core.storage.object_store import ObjectInfo, ObjectStore, side_call


@dataclass(frozen=True)
class GenerationDir:
    """A flushed-generation directory (`path` is relative to its region directory)."""

    region: str
    generation: int
    path: str
    # Listed by no manifest version we can still read: a failed flush, not a pruned generation.
    orphan: bool = False

    def described(self, table: MemWalTable) -> GenerationDir:
        """This directory with its full URI as `path`, for reports (which hold no table)."""
        return replace(self, path=table.store.describe(f"{MEM_WAL_DIR}/{self.region}/{self.path}"))


@dataclass(frozen=True)
class KeptGeneration:
    """A generation (directory) GC keeps, and the rule that keeps it."""

    region: str
    generation: int
    path: str
    reason: str


@dataclass(frozen=True)
class RegionGcPlan:
    """What GC does in one region, read from its manifest version `manifest_version`."""

    region: str
    manifest_version: int
    prune: tuple[GenerationDir, ...]
    # Grace period 0: the pruned directories go in the same run.
    delete_pruned: bool
    delete_dirs: tuple[GenerationDir, ...]
    kept: tuple[KeptGeneration, ...]
    # WAL positions to delete (a prefix older than the fence retention), and covered ones kept for it.
    wal_delete: range
    wal_kept: int
    manifest_delete: tuple[int, ...]
    # Manifest versions no other rule keeps, kept because they are younger than the fence retention.
    manifest_kept: int
    # The oldest stored manifest version, as planned.
    manifest_oldest: int
    # What the region holds as GC found it, for the figures GC records (`stored.py`).
    stored: RegionStored
    # Abandoned `.tmp` uploads in the WAL folder (a writer killed mid-put), by path.
    wal_temp_delete: tuple[str, ...] = ()
    # When GC next scans the WAL folder for them, once this plan ran; None: not scanned this time.
    wal_temp_due: float | None = None

    @property
    def wal_deleted_below(self) -> int | None:
        """The WAL position below which no covered entry is stored once this plan ran (None: no anchor)."""
        return self.wal_delete.stop or None

    @property
    def manifest_oldest_after(self) -> int:
        """The oldest manifest version stored once this plan ran."""
        return self.manifest_delete[-1] + 1 if self.manifest_delete else self.manifest_oldest

    @property
    def deleted_dirs(self) -> tuple[GenerationDir, ...]:
        return self.delete_dirs + (self.prune if self.delete_pruned else ())

    @property
    def has_work(self) -> bool:
        return bool(
            self.prune or self.delete_dirs or self.wal_delete or self.manifest_delete or self.wal_temp_delete
        )


@dataclass(frozen=True)
class GcPlan:
    """Everything one GC run does, read at table version `table_version` at time `planned_at`."""

    table_uri: str
    table_version: int
    planned_at: float
    policy: GcPolicy
    maintained_indexes: tuple[str, ...]
    retained_versions: tuple[int, ...]
    regions: tuple[RegionGcPlan, ...]
    failures: tuple[Failure, ...] = ()
    # Abandoned `_memwal_staging/` files (path, size), older than the policy's staging age.
    stale_staging: tuple[tuple[str, int], ...] = ()
    # Per region, when GC was to scan its WAL folder for abandoned uploads, as recorded before this plan.
    wal_temp_dues: tuple[tuple[str, float], ...] = ()
    # Per region, the oldest manifest version, as recorded before this plan.
    oldest_versions: tuple[tuple[str, int], ...] = ()
    # Per region, where GC's WAL deletes ended, as recorded before this plan.
    wal_deleted: tuple[tuple[str, int], ...] = ()

    @property
    def _listed(self) -> set[str]:
        return {p.region for p in self.regions} | {f.region for f in self.failures if f.region}

    def wal_temp_dues_after(self, failed: set[str]) -> dict[str, float] | None:
        """The record of when GC next scans each WAL folder once this plan ran, but not in the `failed`
        regions (their abandoned uploads may remain); None if it is unchanged. Regions no longer
        listed drop out."""
        done = {
            p.region: p.wal_temp_due
            for p in self.regions
            if p.wal_temp_due is not None and p.region not in failed
        }
        return record_after(dict(self.wal_temp_dues), self._listed, done)

    def oldest_versions_after(self, failed: set[str]) -> dict[str, int] | None:
        """The record of each region's oldest manifest version once this plan ran, but not in the
        `failed` regions (their deletes may have stopped anywhere: the record there is checked and
        searched past); None if it is unchanged."""
        done = {p.region: p.manifest_oldest_after for p in self.regions if p.region not in failed}
        return record_after(dict(self.oldest_versions), self._listed, done)

    def wal_deleted_after(self, failed: set[str]) -> dict[str, int] | None:
        """The record of where each region's WAL deletes ended once this plan ran, but not in the
        `failed` regions (their deletes may have stopped anywhere); None if it is unchanged."""
        done = {
            p.region: p.wal_deleted_below
            for p in self.regions
            if p.wal_deleted_below is not None and p.region not in failed
        }
        return record_after(dict(self.wal_deleted), self._listed, done)


def retained_progress(table: MemWalTable, dataset: Any) -> tuple[list[int], list[dict[str, int]]]:
    """Merge progress of every base-table version a reader can still time-travel to (tagged included).

    Versions without MemWAL constrain nothing: no LSM view exists at them.
    """
    versions = set(table.version_numbers(dataset))
    versions |= {int(tag["version"]) for tag in dataset.tags.list().values()}

    def progress(version: int) -> dict[str, int] | None:
        try:
            return table.index_details(version).merged
        except (MemWalNotEnabledError, NotFoundError):
            return None  # no MemWAL then, or removed by Lance's cleanup meanwhile

    ordered = sorted(versions)
    found = table.store.map(progress, ordered)
    kept = [(v, p) for v, p in zip(ordered, found, strict=True) if p is not None]
    return [v for v, _ in kept], [p for _, p in kept]


def first_unlisting_version(
    versions: Sequence[int], read: Callable[[int], RegionManifest], generation: int, path: str
) -> int:
    """The oldest stored version that had committed `generation` and no longer lists `path`.

    Monotone in the version (the writer never lists a pruned path again), so a
    binary search finds it; the last version satisfies it by construction.
    """
    lo, hi = 0, len(versions) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        manifest = read(versions[mid])
        if manifest.current_generation > generation and path not in {g.path for g in manifest.generations}:
            hi = mid
        else:
            lo = mid + 1
    return versions[lo]


@dataclass(frozen=True)
class RegionListing:
    """A region's generation directories, from one recursive LIST that stops where its manifest
    versions begin: they are found by their two ends (`versions.py`), the WAL's entries by position.
    Generation directories (8 hex digits) sort before `manifest/`, and `wal/` after it.

    On S3 the page that reaches `manifest/` is read whole, and what it holds of the versions costs
    nothing: a prefix of their names, which are their numbers' bits reversed, so every stored
    version that is a multiple of `versions_every` (twice the lowest bit of the last one listed;
    1 when the page also holds the version hint, which sorts after every version). When a WAL scan
    is due (`wal_scan_at`: the plan's time), also the abandoned uploads in its WAL folder (`wal_temps.py`).
    """

    generation_dirs: dict[str, list[ObjectInfo]]
    # The manifest versions listed, and the step every stored version a multiple of is among them
    # (None: none was listed).
    manifest_versions: dict[int, ObjectInfo]
    versions_every: int | None
    wal_temps: WalTempScan | None

    @classmethod
    def read(cls, store: ObjectStore, region: str, *, wal_scan_at: float | None) -> RegionListing:
        region_dir = f"{MEM_WAL_DIR}/{region}"
        wal_dir = f"{region_dir}/{REGION_WAL_DIR}"
        manifests = f"{region_dir}/{REGION_MANIFEST_DIR}/"
        versions: dict[int, ObjectInfo] = {}
        every: int | None = None
        dirs: dict[str, list[ObjectInfo]] = {}
        for info in store.list_files(region_dir, recursive=True, before=f"{wal_dir}/", enough=manifests):
            top, _, rest = info.path[len(region_dir) + 1 :].partition("/")
            if not rest or rest.endswith("/"):
                continue
            if top == REGION_MANIFEST_DIR:
                if rest == VERSION_HINT_FILE:
                    every = 1
                elif rest.endswith(REGION_MANIFEST_SUFFIX) and "/" not in rest:
                    version = parse_bitrev64(rest[: -len(REGION_MANIFEST_SUFFIX)])
                    versions[version] = info
                    every = 2 * (version & -version)  # the listing is sorted: this one is the last yet
            elif generation_from_dir_name(top) is not None:
                dirs.setdefault(top, []).append(info)
        if store.keeps_empty_dirs:  # a GC killed after emptying a directory left it behind, empty
            for name in store.list_dirs(region_dir):
                if generation_from_dir_name(name) is not None:
                    dirs.setdefault(name, [])
        scan = None if wal_scan_at is None else WalTempScan.read(store, wal_dir, wal_scan_at)
        return cls(dirs, versions, every, scan)


@dataclass(frozen=True)
class RegionRead:
    """What GC reads of one region before it decides: its listing, its latest manifest and the
    run of stored manifest versions (and where the last run's WAL deletes ended, as it recorded)."""

    region: str
    listing: RegionListing
    latest: RegionManifest
    versions: StoredVersions
    wal_deleted_below: int | None = None

    @classmethod
    def read(
        cls,
        table: MemWalTable,
        region: str,
        *,
        wal_scan_at: float | None,
        oldest: int | None = None,
        wal_deleted_below: int | None = None,
    ) -> RegionRead | None:
        """The version hint, then one LIST of the region's generation directories, then its latest
        manifest, found from the hint (one HEAD past it), then its oldest manifest version (listed, or
        from `oldest`, as GC recorded it: two HEADs when right); None if it has no manifest yet.

        A hint past the latest version means the newest manifest was deleted: GC must not write over
        the gap. The listing comes first: every directory it shows existed before that manifest was
        read, so the manifest says whether it is listed.
        """
        manifests = table.region_store(region)
        hint = manifests.read_hint()  # before the listing: it can only name a version stored by then
        listing = RegionListing.read(table.store, region, wal_scan_at=wal_scan_at)
        # None: not claimed yet; generations without a manifest are corrupt, and fail the region.
        latest = table.read_region(region, hint)
        if latest is None:
            return None
        manifests.check_hint(hint, latest.version)  # the newest manifest deleted: never write over the gap
        listed = (listing.manifest_versions, listing.versions_every)
        versions = StoredVersions(manifests, latest, oldest, *listed)
        return cls(region, listing, latest, versions, wal_deleted_below)


def plan_region(read_region: RegionRead, bounds: RegionBounds, policy: GcPolicy, now: float) -> RegionGcPlan:
    """The plan of one region, from what was read of it (`RegionRead.read`) and its bounds."""
    region, listing, latest, manifests = (
        read_region.region,
        read_region.listing,
        read_region.latest,
        read_region.versions,
    )
    grace = policy.grace_seconds
    listed = {g.path for g in latest.generations}
    prune: list[GenerationDir] = []
    kept: list[KeptGeneration] = []
    for g in latest.generations:
        reason = bounds.keep_reason(g.generation)
        if reason is None:
            prune.append(GenerationDir(region, g.generation, g.path))
            if grace > 0:
                reason = GRACE_PERIOD
        if reason is not None:
            kept.append(KeptGeneration(region, g.generation, g.path, reason))

    versions, read = manifests.versions, manifests.read
    delete_dirs: list[GenerationDir] = []
    pinned: list[int] = []  # manifest versions that time a grace period still running
    for name, files in sorted(listing.generation_dirs.items()):
        generation = generation_from_dir_name(name)
        if generation is None or name in listed:
            continue
        if generation >= latest.current_generation:
            kept.append(KeptGeneration(region, generation, name, FLUSH_IN_PROGRESS))
            continue
        dropped_in = first_unlisting_version(versions, read, generation, name)
        before = dropped_in - 1
        orphan = before not in versions or name not in {g.path for g in read(before).generations}
        created = manifests.created(dropped_in)
        since = max([now if created is None else created, *(f.mtime for f in files)])
        if now - since >= grace:
            delete_dirs.append(GenerationDir(region, generation, name, orphan=orphan))
        else:
            kept.append(KeptGeneration(region, generation, name, GRACE_PERIOD))
            pinned.append(dropped_in)

    wal_temp, wal_temp_due = (
        listing.wal_temps.decide(now, policy.abandoned_after_seconds) if listing.wal_temps else ([], None)
    )
    anchor = anchor_version(
        versions, manifests.created, now, policy.fence_retention_seconds, manifests.listed
    )
    retention = plan_retention(versions, anchor, read, latest, read_region.wal_deleted_below)

    # Old manifest versions go oldest first, and only a prefix below the retention's anchor, so the
    # stored versions stay contiguous and no stale writer finds the version after its own free.
    others = min([latest.version - policy.keep_manifest_versions + 1, *pinned])
    cutoff = min(others, retention.anchor or 0)
    manifest_delete = tuple(range(versions.start, cutoff))

    return RegionGcPlan(
        region=region,
        manifest_version=latest.version,
        prune=tuple(prune),
        delete_pruned=grace == 0,
        delete_dirs=tuple(delete_dirs),
        kept=tuple(sorted(kept, key=lambda k: (k.generation, k.path))),
        wal_delete=retention.wal_delete,
        wal_kept=retention.wal_kept,
        manifest_kept=len(range(max(cutoff, versions.start), others)),
        manifest_delete=manifest_delete,
        manifest_oldest=versions.start,
        wal_temp_delete=tuple(wal_temp),
        wal_temp_due=wal_temp_due,
        stored=RegionStored.found(listing.generation_dirs, manifests, bounds.merged, latest),
    )


def stale_staging(table: MemWalTable, policy: GcPolicy, now: float) -> tuple[tuple[str, int], ...]:
    """Files no live job can still read, older than `policy.abandoned_after_seconds`: staged parts, and
    the temp files of lease records whose write failed (a full disk) or whose writer died mid-write.
    """
    found = [
        *table.store.list_files(STAGING_DIR, recursive=True),
        *table.store.temporary_files(LEASE_DIR),
    ]
    return tuple(
        (info.path, info.size) for info in found if now - info.mtime > policy.abandoned_after_seconds
    )


@dataclass(frozen=True)
class _TableState:
    """What bounds every region: the table version read, its MemWAL details, the maintained indexes,
    and the merge progress of every version a reader can still time-travel to."""

    version: int
    details: IndexDetails
    indexes: list[str]
    retained_versions: list[int]
    retained: list[dict[str, int]]

    @classmethod
    def read(cls, table: MemWalTable) -> _TableState:
        dataset = table.dataset()
        details = table.index_details(dataset.version)
        indexes = list(read_maintained(table, details, dataset).names)
        return cls(dataset.version, details, indexes, *retained_progress(table, dataset))

    def bounds(self, region: str) -> RegionBounds:
        merged = self.details.merged_generation(region)
        return region_bounds(region, merged, self.details.index_catchup, self.indexes, self.retained)


def plan_gc(
    table: MemWalTable,
    policy: GcPolicy,
    *,
    now: float | None = None,
    clock: Callable[[], float] = time.time,
) -> GcPlan:
    """Plan GC for every region of the table, at `now` (tests), else at `clock()` (a real run: the
    store's, `store_time`).

    The table's state (Lance opens the table, then reads every retained version's manifest) is read
    while the regions are listed and read; each region is then decided. Reading the state after a
    region's manifest keeps at least as much as reading it before: merge progress and index catch-up
    only grow, a version made meanwhile is retained too, and a new index keeps everything.

    The clock is read once all that is read, so a run refused for what it read wrote nothing. Until
    then this host's clock says whether a WAL folder is due a scan for abandoned uploads, and times
    the scan: off by the clock's skew, either only makes a scan come early (reads) or a delete late.
    """
    read_at = time.time() if now is None else now
    # Only where Lance writes through temp files (local disk), and only in folders whose scan is due.
    scans_wal = table.store.lance_puts_through_temp_files
    dues = read_dues(table.store) if scans_wal else {}

    def read_one(region: str) -> RegionRead | Failure | None:
        scan = scans_wal and scan_due(dues.get(region), read_at, policy.abandoned_after_seconds)
        try:
            return RegionRead.read(
                table,
                region,
                wal_scan_at=read_at if scan else None,
                oldest=oldest.get(region),
                wal_deleted_below=wal_deleted.get(region),
            )
        except MemwalError as exc:
            return Failure.of(exc, region)

    with (
        side_call(partial(_TableState.read, table)) as reading,
        side_call(partial(read_oldest, table.store)) as recorded,
        side_call(partial(read_wal_deleted, table.store)) as recorded_wal,
    ):
        regions = table.region_ids()  # while GC's records are read
        oldest, wal_deleted = recorded.result(), recorded_wal.result()
        # One region per thread of the store's pool (`max_concurrent_requests`); its requests run in turn.
        reads = table.store.map(read_one, regions)
    state = reading.result()
    decided_at = clock() if now is None else now

    def plan_one(read: RegionRead) -> RegionGcPlan | Failure:
        try:
            return plan_region(read, state.bounds(read.region), policy, decided_at)
        except MemwalError as exc:
            return Failure.of(exc, read.region)

    # Deciding reads an older manifest version only where a directory is no longer listed.
    planned = table.store.map(plan_one, [r for r in reads if isinstance(r, RegionRead)])
    failures = [r for r in reads if isinstance(r, Failure)] + [p for p in planned if isinstance(p, Failure)]
    return GcPlan(
        table_uri=table.uri,
        table_version=state.version,
        planned_at=decided_at,
        policy=policy,
        maintained_indexes=tuple(state.indexes),
        retained_versions=tuple(state.retained_versions),
        regions=tuple(p for p in planned if isinstance(p, RegionGcPlan)),
        failures=tuple(sorted(failures, key=lambda f: f.region or "")),
        stale_staging=stale_staging(table, policy, decided_at),
        wal_temp_dues=tuple(sorted(dues.items())),
        oldest_versions=tuple(sorted(oldest.items())),
        wal_deleted=tuple(sorted(wal_deleted.items())),
    )
