"""What a table holds by kind, as GC's run found it: the figures GC's outcome record carries.

GC lists every region's generation directories, with their sizes, in the one
LIST per region it makes anyway (it stops where the manifest versions begin).
The figures are that listing less what the run deleted, plus the manifest
version it wrote: no request is added. Generation directories count as
pending above the region's merge progress (at the table version GC read), as
merged at or below it. Manifest versions are counted, not listed: the run
from the oldest to the latest (`versions.py`); their bytes are that count
times the average size of those GC saw anyway (the latest, the ones its
searches looked at, on S3 those its listing's page holds: all of them in a
region of fewer than about 1,000). WAL entries are counted, not listed: the
positions from the oldest GC keeps to the last the region manifest records
(`wal_entry_position_last_seen`, which Lance updates at every flush and
claim, so entries written since are not counted); their bytes are unknown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwal_core.format.naming import generation_from_dir_name
from memwal_core.format.regions import RegionManifest
from memwal_core.model.outcomes import Stored
from memwal_core.services.result import Failure
from memwal_core.storage.object_store import ObjectInfo

if TYPE_CHECKING:
    from memwal_core.services.gc.execute import RegionGcOutcome
    from memwal_core.services.gc.plan import GcPlan
    from memwal_core.services.gc.versions import StoredVersions

PENDING = "pending_generations"
MERGED = "merged_generations"
MANIFESTS = "region_manifests"
WAL = "wal_entries"
KINDS = (PENDING, MERGED, MANIFESTS, WAL)


@dataclass(frozen=True)
class RegionStored:
    """What GC found of one region: its merge progress, each generation directory (name,
    generation, objects, bytes), its stored manifest versions and their average size, and the
    WAL entries past its last flush."""

    merged: int
    generation_dirs: tuple[tuple[str, int, int, int], ...]
    manifest_versions: range
    manifest_bytes_each: float
    wal_to_replay: int

    @classmethod
    def found(
        cls,
        dirs: Mapping[str, Iterable[ObjectInfo]],
        versions: StoredVersions,
        merged: int,
        latest: RegionManifest,
    ) -> RegionStored:
        found = []
        for name, files in sorted(dirs.items()):
            generation = generation_from_dir_name(name)
            if generation is not None:
                sizes = [f.size for f in files]
                found.append((name, generation, len(sizes), sum(sizes)))
        seen = versions.sizes_seen()
        each = sum(seen) / len(seen)
        return cls(merged, tuple(found), versions.versions, each, latest.wal_entries_to_replay)


def stored_after(
    plan: GcPlan, outcomes: Sequence[RegionGcOutcome], failures: Sequence[Failure]
) -> dict[str, Stored] | None:
    """What the table holds by kind once the run ended; None if a region could not be listed or
    planned (the figures would leave it out). A region that failed keeps all it listed."""
    if plan.failures:
        return None
    failed = {f.region for f in failures}
    written = {o.region: (o.pruned_in_version, o.pruned_manifest_bytes) for o in outcomes}
    objects: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for p in plan.regions:
        listed, ran = p.stored, p.region not in failed
        gone = {d.path for d in p.deleted_dirs} if ran else set()
        for name, generation, count, size in listed.generation_dirs:
            if name not in gone:
                kind = PENDING if generation > listed.merged else MERGED
                objects[kind] += count
                sizes[kind] += size
        oldest = p.manifest_oldest_after if ran else listed.manifest_versions.start
        kept = len(range(oldest, listed.manifest_versions.stop))
        version, size = written.get(p.region, (None, 0))
        objects[MANIFESTS] += kept + (version is not None)
        sizes[MANIFESTS] += round(kept * listed.manifest_bytes_each) + size
        objects[WAL] += listed.wal_to_replay + p.wal_kept + (0 if ran else len(p.wal_delete))
    return {kind: Stored(objects[kind], None if kind == WAL else sizes[kind]) for kind in KINDS}
