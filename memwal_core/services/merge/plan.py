"""Merge plans: which generations of which regions to merge, read at which table version.

A plan is small, frozen and picklable, so it can be printed (`--dry-run`),
shipped to Spark executors and retried. Each region's pending generations are
taken strictly in ascending order from `merged + 1`, with no gap: merging past
a generation the manifest no longer lists would skip its rows for good.

Every generation carries its size (rows, bytes), which the round's memory
budget is applied to: the sizes the region manifest records, or, where a
writer recorded none (absent is unknown, not zero), the row count from the
generation's own Lance manifest and the size of its data files.

A round its poller asked for moments ago reads each region at the manifest version the poller saw,
with no HEAD of the next one, so a flush since is left to the next round. That version may be older
than the newest, which is safe: a version never changes once written, and later ones only add
generations (GC prunes only merged ones), so the pending prefix it gives, from `merged + 1` as
always, is a prefix of the newest one's: nothing is skipped, merged twice or taken back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memwal_core.errors import BadInputError, CorruptMetadataError, MemwalError, NotFoundError
from memwal_core.format.naming import MEM_WAL_DIR
from memwal_core.format.regions import RegionManifest
from memwal_core.model.table import MemWalTable
from memwal_core.services.result import Failure, to_jsonable
from memwal_core.services.snapshot.stored import newest_hints, regions_and_hints
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.object_store import absolute_uri

# A poller's manifest versions are planned as they are (no HEAD of the next version each) by a round that
# plans within this many seconds of the poller's probes: a sensor's round starts a few seconds after its
# tick, one held in the run queue for longer verifies them (see `plan_merge`).
POLLED_CURRENT_SECONDS = 30.0


@dataclass(frozen=True)
class GenerationSource:
    """One flushed generation to read: its number, its dataset URI and its size.

    `path` is relative to the table root (for the object store); `rows` and
    `bytes` are None only until `plan_merge` has measured what the manifest
    did not record.
    """

    generation: int
    uri: str
    path: str = ""
    rows: int | None = None
    bytes: int | None = None


@dataclass(frozen=True)
class RegionMergePlan:
    """The pending prefix of one region, in ascending generation order.

    `table_uri` is absolute: executors may run in another working directory.
    """

    table_uri: str
    region: str
    merged_before: int
    manifest_version: int
    generations: tuple[GenerationSource, ...]
    # The newest generation the manifest lists, pending or not (a plan may take only a prefix).
    latest_flushed: int = 0

    @property
    def target_generation(self) -> int:
        """The generation the merge marks: the highest of the prefix."""
        return self.generations[-1].generation

    @property
    def rows(self) -> int:
        return sum(g.rows or 0 for g in self.generations)

    @property
    def bytes(self) -> int:
        return sum(g.bytes or 0 for g in self.generations)

    def prefix(self, count: int) -> RegionMergePlan:
        """The first `count` generations (what one commit merges)."""
        return replace(self, generations=self.generations[:count])

    def after(self, merged: int) -> RegionMergePlan | None:
        """What is left once generation `merged` is merged, or None if nothing is."""
        rest = tuple(g for g in self.generations if g.generation > merged)
        return replace(self, merged_before=merged, generations=rest) if rest else None

    def summary(self) -> dict[str, Any]:
        """What a dry run shows of it: generation numbers, not their sources."""
        return {
            "region": self.region,
            "merged_generation": self.merged_before,
            "manifest_version": self.manifest_version,
            "generations": [g.generation for g in self.generations],
        }


@dataclass(frozen=True)
class MergePlan:
    """Everything a merge needs, read at one table version."""

    table_uri: str
    table_version: int
    primary_key: tuple[str, ...]
    regions: tuple[RegionMergePlan, ...]
    failures: tuple[Failure, ...] = ()

    def summary(self) -> dict[str, Any]:
        """What a dry run shows of it (the `plan` of `merge --dry-run --json`)."""
        return {
            "table": self.table_uri,
            "table_version": self.table_version,
            "primary_key": list(self.primary_key),
            "regions": [r.summary() for r in self.regions],
            "failures": to_jsonable(self.failures),
        }


def region_plan(
    table: MemWalTable, manifest: RegionManifest, merged: int, max_generations: int | None
) -> RegionMergePlan | None:
    """The pending prefix of one region, or None if nothing is pending."""
    pending = [g for g in manifest.generations if g.generation > merged]
    if not pending:
        return None
    expected = merged + 1
    for g in pending:
        if g.generation != expected:
            raise CorruptMetadataError(
                f"region {manifest.region}: generation {expected} is not listed in manifest version "
                f"{manifest.version} (merged {merged}, next listed {g.generation}); refusing to merge past it"
            )
        expected += 1
    if max_generations is not None:
        pending = pending[:max_generations]
    table_uri = absolute_uri(table.uri)
    base = f"{MEM_WAL_DIR}/{manifest.region}"
    return RegionMergePlan(
        table_uri=table_uri,
        region=manifest.region,
        merged_before=merged,
        manifest_version=manifest.version,
        generations=tuple(
            GenerationSource(
                g.generation,
                f"{table_uri}/{base}/{g.path}",
                f"{base}/{g.path}",
                g.physical_rows,
                g.in_memory_bytes,
            )
            for g in pending
        ),
        latest_flushed=max(g.generation for g in manifest.generations),
    )


def as_polled(
    polled: Mapping[str, int], polled_at: float | None, snapshot: Mapping[str, int], now: float
) -> set[str]:
    """The regions whose `polled` version a round plans as it is: those at least as new as the
    `snapshot`'s, if the poller saw them all current at `polled_at`, at most POLLED_CURRENT_SECONDS
    before `now`."""
    if polled_at is None or not 0 <= now - polled_at <= POLLED_CURRENT_SECONDS:
        return set()
    return {r for r, v in polled.items() if v >= snapshot.get(r, 0)}


def plan_merge(
    table: MemWalTable,
    *,
    regions: Iterable[str] | None = None,
    max_generations: int | None = None,
    manifest_versions: Mapping[str, int] | None = None,
    polled_at: float | None = None,
) -> MergePlan:
    """Plan the merge of every pending generation (or of the named regions only).

    `manifest_versions`: per region, a manifest version a poller read just before (newer than the
    region snapshot's under a writer): each region is read from the newer of the two, verified with
    one HEAD of the next version. `polled_at`: when the poller last saw every one of them to be its
    region's newest; a round planned within POLLED_CURRENT_SECONDS of it reads them as they are,
    with no HEAD (`as_polled`), and merges what its poller saw: a flush since waits for the next round.
    """
    if max_generations is not None and max_generations < 1:
        raise BadInputError(f"--max-generations must be at least 1, not {max_generations}")
    version = table.latest_version()
    details = table.index_details(version)
    primary_key = details.primary_key
    if not primary_key:
        raise CorruptMetadataError(f"table {table.uri} has no primary key; merges need one")
    ids, snapshot = regions_and_hints(table, details)
    polled = manifest_versions or {}
    current = as_polled(polled, polled_at, snapshot, time.time())
    hints = newest_hints(snapshot, polled)
    if regions is not None:
        known = set(ids)
        ids = sorted(set(regions))
        unknown = [r for r in ids if r not in known]
        if unknown:
            raise NotFoundError(f"table {table.uri} has no region {unknown[0]}")
    plans: list[RegionMergePlan] = []
    failures: list[Failure] = []

    def plan_one(region: str) -> RegionMergePlan | MemwalError | None:
        """One region's plan; a region that cannot be read or planned fails alone."""
        try:
            manifest = table.read_region(region, hints.get(region), current=region in current)
            if manifest is None:
                return None
            return region_plan(table, manifest, details.merged_generation(region), max_generations)
        except MemwalError as exc:
            return exc

    for region, outcome in sorted(zip(ids, table.store.map(plan_one, ids), strict=True)):
        if isinstance(outcome, MemwalError):
            failures.append(Failure.of(outcome, region))
        elif outcome is not None:
            plans.append(outcome)
    return MergePlan(table.uri, version, primary_key, tuple(measured(table, plans)), tuple(failures))


def _measure(table: MemWalTable, source: GenerationSource) -> GenerationSource:
    """Fill in the size a writer did not record: rows from Lance's metadata, bytes from the data files."""
    rows = source.rows
    if rows is None:
        try:
            rows = int(open_dataset(source.uri, table.storage_options.as_dict()).count_rows())
        except (ValueError, OSError):
            rows = None  # unreadable: the collapse reports it, with the generation's path
    size = source.bytes
    if size is None:
        size = sum(info.size for info in table.store.list_files(f"{source.path}/data"))
    return replace(source, rows=rows, bytes=size)


def measured(table: MemWalTable, plans: Sequence[RegionMergePlan]) -> list[RegionMergePlan]:
    """`plans` with every generation's size known (measured in parallel where the manifest had none)."""
    unknown = [g for p in plans for g in p.generations if g.rows is None or g.bytes is None]
    if not unknown:
        return list(plans)
    sizes = {g.uri: g for g in table.store.map(lambda g: _measure(table, g), unknown)}
    return [replace(p, generations=tuple(sizes.get(g.uri, g) for g in p.generations)) for p in plans]
