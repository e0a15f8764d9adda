"""`backlog`: what each region still has to merge, how big and how old it is.

Merge lag is read latency (every unmerged generation is read by every LSM
read), so the orchestrator watches three numbers per region: pending
generations, their bytes, and the age of the oldest one. The age is the
modification time of the oldest pending generation's first dataset
manifest: one HEAD per region whose oldest pending generation is new, none
for the others.

A caller that polls (the Dagster sensor, the exporter) passes what it saw
last time (`backlog_since`): a region whose manifest has no newer version
(one HEAD) and whose merge progress did not move keeps its backlog, so a
tick reads only what changed; and it probes a quiet region, the table's
version and its region listing less often the longer they stay the same
(backoff.py), down to once per the poller's bound, so a quiet table costs
a few requests a minute, not one per region per tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import MEM_WAL_DIR, TABLE_VERSIONS_DIR, table_manifest_name
from memwal_core.format.regions import RegionManifest
from memwal_core.model.table import MemWalTable
from memwal_core.services.backoff import EVERY_READ, Backoff, Clock, probed
from memwal_core.services.snapshot.stored import read_hinted, snapshot_hints


@dataclass(frozen=True)
class RegionBacklog:
    """One region's unmerged flushed generations."""

    region: str
    merged_generation: int
    latest_flushed: int
    pending: tuple[int, ...]
    pending_bytes: int
    oldest_pending_created_at: float | None

    def to_list(self) -> list[object]:
        """A compact JSON form (for a sensor's cursor)."""
        return [
            self.merged_generation,
            self.latest_flushed,
            list(self.pending),
            self.pending_bytes,
            self.oldest_pending_created_at,
        ]

    def merged_to(self, merged: int) -> RegionBacklog:
        """This backlog once a merge reached `merged`, at least its latest flushed generation: none left."""
        return RegionBacklog(self.region, merged, self.latest_flushed, (), 0, None)

    @classmethod
    def from_list(cls, region: str, data: Sequence[Any]) -> RegionBacklog:
        merged, latest, pending, size, created = data
        return cls(region, int(merged), int(latest), tuple(int(g) for g in pending), int(size), created)

    def oldest_pending_age(self, now: float) -> float:
        """Seconds since the oldest pending generation was flushed (0 without a backlog)."""
        if self.oldest_pending_created_at is None:
            return 0.0
        return max(0.0, now - self.oldest_pending_created_at)


@dataclass(frozen=True)
class TableBacklog:
    """Every region's backlog read at one table version: what the orchestrator watches, not a report."""

    table: str
    table_version: int
    regions: list[RegionBacklog]
    read_at: float
    # When the oldest reading it keeps was taken (a poller keeps regions it did not probe); default read_at.
    seen_at: float | None = None

    @property
    def pending_total(self) -> int:
        return sum(len(r.pending) for r in self.regions)

    @property
    def max_pending(self) -> int:
        return max((len(r.pending) for r in self.regions), default=0)

    @property
    def max_age_seconds(self) -> float:
        return max((r.oldest_pending_age(self.read_at) for r in self.regions), default=0.0)

    @property
    def complete_as_of(self) -> float:
        """The time before which every flushed generation is merged: the read's time less the longest
        lag, or, if earlier, when the oldest reading was taken (a flush since would not show)."""
        seen_at = self.read_at if self.seen_at is None else self.seen_at
        return min(self.read_at - self.max_age_seconds, seen_at)


def backlog(table: MemWalTable, regions: Iterable[str] | None = None) -> TableBacklog:
    """Every region's backlog (or the named regions') at the latest table version (changes nothing)."""
    version = table.latest_version()
    details = table.index_details(version)
    return backlog_of(table, version, details, read_hinted(table, details, regions))


def region_backlog(
    table: MemWalTable,
    manifest: RegionManifest,
    merged: int,
    before: RegionBacklog | None = None,
    unseen_at: float | None = None,
) -> RegionBacklog:
    """One region's backlog from its latest manifest: one request dating its oldest pending generation
    (`flushed_at`), none if `before` (an earlier reading) dated the same one, or if that generation
    is newer than all `before` saw and `unseen_at` (a moment, at most DATED_BY_PROBE_WITHIN ago, when
    the manifest `before` was read from was still the newest) dates it: it was flushed since. A
    writer's manifest moves more often than it flushes (a running writer writes two versions at its
    first put after a flush)."""
    region = manifest.region
    pending = [g for g in manifest.generations if g.generation > merged]
    created = None
    if pending and before is not None and before.pending[:1] == (pending[0].generation,):
        created = before.oldest_pending_created_at
    elif (
        pending
        and before is not None
        and unseen_at is not None
        and pending[0].generation > before.latest_flushed
    ):
        created = unseen_at
    if pending and created is None:
        created = flushed_at(table, f"{MEM_WAL_DIR}/{region}/{pending[0].path}")
    return RegionBacklog(
        region=region,
        merged_generation=merged,
        latest_flushed=max((g.generation for g in manifest.generations), default=merged),
        pending=tuple(g.generation for g in pending),
        pending_bytes=sum(g.in_memory_bytes or 0 for g in pending),
        oldest_pending_created_at=created,
    )


def flushed_at(table: MemWalTable, generation: str) -> float | None:
    """When the generation at `generation` was flushed: the modification time of its first dataset
    manifest, where Lance's writer puts it (one HEAD, a twelfth of a LIST's price on S3), else of
    the oldest of its versions (one LIST)."""
    versions = f"{generation}/{TABLE_VERSIONS_DIR}"
    first = table.store.head(f"{versions}/{table_manifest_name(1)}")
    if first is not None:
        return first.mtime
    return min((info.mtime for info in table.store.list_files(versions)), default=None)


def backlog_of(
    table: MemWalTable, version: int, details: IndexDetails, manifests: Mapping[str, RegionManifest | None]
) -> TableBacklog:
    """The backlog from region manifests already read (a region without a manifest has none)."""
    read = [m for _region, m in sorted(manifests.items()) if m is not None]
    found = table.store.map(lambda m: region_backlog(table, m, details.merged_generation(m.region)), read)
    return TableBacklog(table.uri, version, found, time.time())


# A generation first seen within this many seconds of a probe that did not see it is dated by that probe:
# its age is then at most this much over, and dating it costs no request (a HEAD per flush per poller).
DATED_BY_PROBE_WITHIN = 30.0

# The clocks of a poller's table-level probes (`Watched.clocks`), named after what they read.
VERSIONS_PROBE = TABLE_VERSIONS_DIR  # the next table version's manifest: one HEAD
LISTING_PROBE = MEM_WAL_DIR  # the region listing: one LIST


@dataclass(frozen=True)
class Watched:
    """What a poller keeps of a table between reads of its backlog.

    `version`: the table version last read. `seen`: per region, the manifest version and backlog
    last read. `clocks`: per region and per table-level probe (VERSIONS_PROBE, LISTING_PROBE), when
    the poller last saw it change and last probed it (backoff.py).
    """

    version: int | None = None
    seen: Mapping[str, tuple[int, RegionBacklog]] = field(default_factory=dict)
    clocks: Mapping[str, Clock] = field(default_factory=dict)


@dataclass(frozen=True)
class SeenBacklog:
    """Every region's backlog as a poller saw it, and what it keeps for its next read.

    `details`: the MemWAL details it was read at; `manifests`: the regions it read in full
    (None: no manifest yet), the others kept what the poller saw before.
    """

    backlog: TableBacklog
    watched: Watched
    details: IndexDetails
    manifests: dict[str, RegionManifest | None]

    @property
    def manifest_versions(self) -> dict[str, int]:
        """The manifest version each region's backlog was read from."""
        return {r: v for r, (v, _b) in self.watched.seen.items()}


def _moved(table: MemWalTable, seen: Mapping[str, tuple[int, RegionBacklog]], regions: list[str]) -> set[str]:
    """The regions, of `regions`, with a manifest version newer than the one seen (one HEAD each, at once)."""
    found = table.store.exists_many([table.region_store(r).next_path(seen[r][0]) for r in regions])
    return {r for r, moved in zip(regions, found, strict=True) if moved}


# A region's merged generation: `IndexDetails.merged_generation`, or what a merge round merged it to.
MergedOf = Callable[[str], int]


def _caught_up(
    merged: MergedOf, seen: Mapping[str, tuple[int, RegionBacklog]], regions: Iterable[str]
) -> list[str]:
    """The regions, of `regions`, whose merge progress reached the latest generation they were seen to flush."""
    return [r for r in regions if merged(r) >= seen[r][1].latest_flushed]


def _merged_up(
    merged: MergedOf, seen: Mapping[str, tuple[int, RegionBacklog]], regions: Iterable[str]
) -> dict[str, tuple[int, RegionBacklog]]:
    """Caught-up regions with no newer manifest version: their reading, less the backlog a merge took."""
    return {r: (seen[r][0], seen[r][1].merged_to(merged(r))) for r in regions}


def backlog_after(
    table: MemWalTable,
    version: int,
    seen: Mapping[str, tuple[int, RegionBacklog]],
    merged: Mapping[str, int],
) -> TableBacklog:
    """The backlog, at table `version`, of the regions a merge round merged: `seen`, each one's manifest
    version and backlog as the round planned it, and `merged`, the generation the round merged it to.

    A region the round caught up with all its planned manifest listed is observed as the round left
    it, for no request: a flush since is its poller's to see, whose next read probes the region
    anyway (its merge progress moved), and a HEAD here would only repeat that probe. One with
    pending generations left is read again from the version seen.
    """
    merged_of = merged.__getitem__
    kept = _merged_up(merged_of, seen, _caught_up(merged_of, seen, sorted(seen)))
    changed = [r for r in sorted(seen) if r not in kept]
    _manifests, _read, regions = _read_again(table, merged_of, seen, kept, changed, set(), {}, {})
    return TableBacklog(table.uri, version, regions, time.time())


def _read_again(
    table: MemWalTable,
    merged: MergedOf,
    seen: Mapping[str, tuple[int, RegionBacklog]],
    kept: Mapping[str, tuple[int, RegionBacklog]],
    changed: Sequence[str],
    newer: set[str],
    hints: Mapping[str, int],
    unseen_at: Mapping[str, float],
) -> tuple[dict[str, RegionManifest | None], list[RegionManifest], list[RegionBacklog]]:
    """Read the `changed` regions again (from the version seen, else the hint; `newer`: their next
    version was just seen stored), each at its `merged` generation: their manifests, those that
    exist, and every region's backlog, the `kept` ones' as they were. A region read again is dated
    from its earlier reading where that still holds, or from `unseen_at` (`region_backlog`)."""
    found = table.store.map(
        lambda r: table.read_region(r, seen[r][0] if r in seen else hints.get(r), moved=r in newer), changed
    )
    manifests: dict[str, RegionManifest | None] = dict(zip(changed, found, strict=True))
    read = [m for _r, m in sorted(manifests.items()) if m is not None]
    fresh = table.store.map(
        lambda m: region_backlog(
            table,
            m,
            merged(m.region),
            seen[m.region][1] if m.region in seen else None,
            unseen_at.get(m.region),
        ),
        read,
    )
    regions = sorted([*(b for _v, b in kept.values()), *fresh], key=lambda b: b.region)
    return manifests, read, regions


def _quiet(clocks: Mapping[str, Clock], seen: Mapping[str, object], now: float, backoff: Backoff) -> bool:
    """Whether no region of the table was seen to change within the last `bound` seconds."""
    return all(now - c.changed_at >= backoff.bound for r, c in clocks.items() if r in seen)


def backlog_since(
    table: MemWalTable,
    before: Watched,
    backoff: Backoff = EVERY_READ,
    *,
    now: float | None = None,
    version_backoff: Backoff | None = None,
) -> SeenBacklog:
    """Every region's backlog, probing only what `backoff` says is due at `now` since `before`.

    The table version is probed (one HEAD of its next manifest) when due (by `version_backoff`,
    default `backoff`), and on every read while a region has pending generations: a merge is what
    moves it. The regions are listed when due; between, they are the regions seen
    before. A region not seen before, or whose merge progress moved short of its latest flushed
    generation, is read in full (from its seen version or, for a new one, the stored region
    snapshot's); one whose merge caught up is probed (one HEAD of its next manifest version) and
    keeps its reading, with no backlog, unless that exists; one seen before is probed when due and
    read in full if its next version exists; the others keep their backlog.
    """
    now = time.time() if now is None else now
    seen = before.seen
    clocks = dict(before.clocks)
    pending = any(b.pending for _v, b in seen.values())
    if before.version is None or pending or (version_backoff or backoff).due(clocks.get(VERSIONS_PROBE), now):
        version = table.version_after(before.version)
        clocks[VERSIONS_PROBE] = probed(clocks.get(VERSIONS_PROBE), now, version != before.version)
    else:
        version = before.version
    details = table.index_details(version)
    listed = backoff.due(clocks.get(LISTING_PROBE), now)
    ids = table.region_ids() if listed else sorted(seen)
    hints: Mapping[str, int] = {}
    if any(region not in seen for region in ids):
        hints = snapshot_hints(table, details)

    # A region seen before whose merge progress is unchanged costs one HEAD (of its next manifest
    # version) when its probe is due, probed for all such regions at once; only the others are read.
    same = [r for r in ids if r in seen and seen[r][1].merged_generation == details.merged_generation(r)]
    # A region whose merge caught up with all it had flushed keeps its reading, less the backlog, while
    # no newer manifest version exists: one HEAD after each merge, not its manifest read again.
    caught_up = _caught_up(details.merged_generation, seen, [r for r in ids if r in seen and r not in same])
    due = [r for r in same if backoff.due(clocks.get(r), now, r)]
    newer = _moved(table, seen, due + caught_up)
    if newer and _quiet(clocks, seen, now, backoff):
        # A quiet table woke: flushes come in bursts, so every other region is probed now too.
        probing = set(due)
        rest = [r for r in same if r not in probing]
        newer |= _moved(table, seen, rest)
        due += rest
    kept = {r: seen[r] for r in same if r not in newer}
    merged_up = [r for r in caught_up if r not in newer]
    kept |= _merged_up(details.merged_generation, seen, merged_up)
    changed = [r for r in ids if r not in kept]
    # A region last probed moments ago dates what it flushed since by that probe, not by a request.
    unseen_at = {
        r: c.probed_at
        for r in changed
        if (c := clocks.get(r)) and 0 <= now - c.probed_at <= DATED_BY_PROBE_WITHIN
    }
    manifests, read, regions = _read_again(
        table, details.merged_generation, seen, kept, changed, newer, hints, unseen_at
    )
    by_region = {b.region: b for b in regions}
    now_seen = kept | {m.region: (m.version, by_region[m.region]) for m in read}

    # A region's clock runs from its writer's last flush: a merge (ours) says nothing of when the
    # writer flushes next, nor does a claim (Lance's writer claims again after each flush, and its
    # WAL tailer moves the manifest too), so only a new flushed generation restarts its backoff.
    for region in {*(set(due) - newer), *merged_up}:
        clocks[region] = probed(clocks.get(region), now, False)
    for manifest in read:
        flushed = manifest.region not in seen or (
            seen[manifest.region][1].latest_flushed != by_region[manifest.region].latest_flushed
        )
        clocks[manifest.region] = probed(clocks.get(manifest.region), now, flushed)
    if listed:
        clocks[LISTING_PROBE] = probed(
            clocks.get(LISTING_PROBE), now, any(m.region not in seen for m in read)
        )
    kept_clocks = {k: c for k, c in clocks.items() if k in now_seen or k in (VERSIONS_PROBE, LISTING_PROBE)}
    # Nothing flushed since the oldest probe of a region or of the listing is known.
    seen_at = min((c.probed_at for k, c in kept_clocks.items() if k != VERSIONS_PROBE), default=now)
    backlog = TableBacklog(table.uri, version, regions, now, seen_at)
    return SeenBacklog(backlog, Watched(version, now_seen, kept_clocks), details, manifests)
