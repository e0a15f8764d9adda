"""`TableWatch`: what monitoring reads of a table, at the Dagster sensor's cost.

A watch reads a table again and again (`memwal metrics` on every scrape
interval) and keeps what it read: a region whose manifest has no newer
version and whose merge progress did not move costs one HEAD when its probe
is due (`backlog_since` and its backoff, the sensor tick's read), a changed
one its manifest and, with a backlog, one LIST for the age of its oldest
pending generation. The next table version is probed (one HEAD) on every
read while generations are pending (a merge shows at once), else at least
once a minute (a table that cannot be read says so); the region
listing, the four outcome records (`model/outcomes.py`) and one HEAD proving
the oldest stored version is still the oldest are read when due, the
outcomes also on every read while a new version or a backlog says a service
may just have ended. What is not read keeps its last reading.

Per region it reports the backlog (generations, rows when every pending
generation records them, bytes, when the oldest was flushed), the merged and
latest flushed generation, the WAL entries a new writer would replay
(`wal_entry_position_last_seen - replay_after_wal_entry_position`, as the
manifest last recorded them: Lance updates the position at every flush and
claim), the bytes GC may release now and how many merges in a row failed on
it. GC may release a listed generation that is merged, caught up by every
maintained index, and merged at the oldest stored table version (time travel
to any later version no longer reads it); that version stands for every
retained one because merge progress only grows (`memwal snapshot` repairs a
rollback). Bytes are the in-memory sizes the region manifest records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from memwal_core.errors import MemWalNotEnabledError, NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import (
    OUTCOME_DIR,
    TABLE_VERSIONS_DIR,
    table_manifest_name,
    table_manifest_version,
)
from memwal_core.format.regions import RegionManifest
from memwal_core.model.indexes import read_maintained
from memwal_core.model.outcomes import MERGE, SERVICES, Outcome, read_outcome
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import RegionBacklog, Watched, backlog_since
from memwal_core.services.backoff import EVERY_READ, Backoff, Clock, probed
from memwal_core.services.gc.rules import region_bounds


@dataclass(frozen=True)
class RegionWatch:
    """One region as monitoring sees it."""

    region: str
    backlog: RegionBacklog
    pending_rows: int | None
    wal_entries_held: int
    gc_eligible_bytes: int
    merge_failures: int


@dataclass(frozen=True)
class TableReading:
    """One read of a table: its regions, the last outcome of each service, and what the read cost."""

    table: str
    table_version: int
    read_at: float
    seconds: float
    requests: int
    regions: list[RegionWatch]
    outcomes: dict[str, Outcome]


# However quiet a table, a read probes its version at least this often: a storage outage shows in `up`.
READABLE_WITHIN = 60.0

# The exporter's own table-level probes, beside the backlog's (backlog.py), named after what they read.
OUTCOMES_PROBE = OUTCOME_DIR
OLDEST_PROBE = "oldest_version"


class TableWatch:
    """Reads one table repeatedly, each time only what is due (`backoff`) and may have changed."""

    def __init__(self, table: MemWalTable, backoff: Backoff = EVERY_READ) -> None:
        self.table = table
        self.backoff = backoff
        self._watched = Watched()
        self._manifests: dict[str, RegionManifest | None] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._clocks: dict[str, Clock] = {}
        # The maintained indexes at the table version they were read at.
        self._maintained: tuple[int, list[str]] | None = None
        # The oldest stored table version and the merge progress of the oldest one with MemWAL.
        self._oldest: tuple[int, dict[str, int]] | None = None

    def read(self, now: float | None = None) -> TableReading:
        """The table as of `now` (default: the clock's): what is due is read, the rest kept."""
        table = self.table
        now = time.time() if now is None else now
        table.store.stats.reset()
        started = time.perf_counter()
        before = self._watched.version
        # The table's version is probed on every read while generations are pending (a merge shows at
        # once), else at least every READABLE_WITHIN seconds: it proves the table readable.
        proof = Backoff(self.backoff.tick, min(self.backoff.bound, READABLE_WITHIN))
        found = backlog_since(table, self._watched, self.backoff, now=now, version_backoff=proof)
        version = found.backlog.table_version
        self._watched = found.watched
        self._manifests = {
            r.region: found.manifests.get(r.region, self._manifests.get(r.region))
            for r in found.backlog.regions
        }
        pending = any(r.pending for r in found.backlog.regions)
        outcomes = self._read_outcomes(now, version != before or pending)
        merge_failing = outcomes[MERGE].failing if MERGE in outcomes else {}
        maintained = self._maintained_names(found.details)
        retained = self._retained_progress(now)
        regions = []
        for backlog in found.backlog.regions:
            manifest = self._manifests.get(backlog.region)
            bounds = region_bounds(
                backlog.region,
                backlog.merged_generation,
                found.details.index_catchup,
                maintained,
                [retained],
            )
            failing = merge_failing.get(backlog.region)
            regions.append(
                RegionWatch(
                    region=backlog.region,
                    backlog=backlog,
                    pending_rows=_pending_rows(manifest, backlog.merged_generation),
                    wal_entries_held=_wal_entries_held(manifest),
                    gc_eligible_bytes=sum(
                        g.in_memory_bytes or 0
                        for g in (manifest.generations if manifest else ())
                        if bounds.keep_reason(g.generation) is None
                    ),
                    merge_failures=failing.runs if failing else 0,
                )
            )
        return TableReading(
            table=table.uri,
            table_version=found.backlog.table_version,
            read_at=found.backlog.read_at,
            seconds=time.perf_counter() - started,
            requests=table.store.stats.total(),
            regions=regions,
            outcomes=outcomes,
        )

    def _read_outcomes(self, now: float, active: bool) -> dict[str, Outcome]:
        """The services' records, each read when due. While the table is `active` (a new version,
        generations pending) the merge's record is read on every read: a merge ending is what changes
        it, and its failures alert. The others, and records a scheduled service rewrote while the table
        is quiet, are seen within the bound."""
        clock = self._clocks.get(OUTCOMES_PROBE)
        due = self.backoff.due(clock, now)
        if due or active:
            services = SERVICES if due else (MERGE,)
            read = {s: read_outcome(self.table.store, s) for s in services}
            self._outcomes = {
                s: o for s in SERVICES if (o := read[s] if s in read else self._outcomes.get(s)) is not None
            }
            if due:
                self._clocks[OUTCOMES_PROBE] = probed(clock, now, False)
        return self._outcomes

    def _maintained_names(self, details: IndexDetails) -> list[str]:
        """The maintained indexes at the details' version: Lance opens that version only when it is new."""
        if self._maintained is None or self._maintained[0] != details.table_version:
            self._maintained = details.table_version, list(read_maintained(self.table, details).names)
        return self._maintained[1]

    def _retained_progress(self, now: float) -> dict[str, int]:
        """Merge progress at the oldest stored version: kept until due, then one HEAD while that version
        stays, else a LIST."""
        store = self.table.store
        clock = self._clocks.get(OLDEST_PROBE)
        if self._oldest is not None and not self.backoff.due(clock, now):
            return self._oldest[1]
        if self._oldest is not None and store.exists(_manifest_path(self._oldest[0])):
            self._clocks[OLDEST_PROBE] = probed(clock, now, False)
            return self._oldest[1]
        names = (info.path.rsplit("/", 1)[-1] for info in store.list_files(TABLE_VERSIONS_DIR))
        versions = sorted(v for v in map(table_manifest_version, names) if v is not None)
        progress: dict[str, int] = {}
        for version in versions:
            details = _details(self.table, version)
            if details is not None:
                progress = details.merged
                break
        self._oldest = (versions[0], progress) if versions else None
        self._clocks[OLDEST_PROBE] = probed(clock, now, True)
        return progress


def _manifest_path(version: int) -> str:
    return f"{TABLE_VERSIONS_DIR}/{table_manifest_name(version)}"


def _details(table: MemWalTable, version: int) -> IndexDetails | None:
    """The details at `version`; None before MemWAL was enabled, or once Lance's cleanup removed it."""
    try:
        return table.index_details(version)
    except (MemWalNotEnabledError, NotFoundError):
        return None


def _pending_rows(manifest: RegionManifest | None, merged: int) -> int | None:
    pending = [g for g in (manifest.generations if manifest else ()) if g.generation > merged]
    rows: list[Any] = [g.physical_rows for g in pending]
    return None if None in rows else sum(rows)


def _wal_entries_held(manifest: RegionManifest | None) -> int:
    return manifest.wal_entries_to_replay if manifest is not None else 0
