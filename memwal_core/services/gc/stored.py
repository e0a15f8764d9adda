"""What a table holds by kind, as GC's run found it: the figures GC's outcome record carries.

GC lists every region's generation directories and manifest versions, with
their sizes, in the one LIST per region it makes anyway (it stops where the
WAL begins). The figures are that listing less what the run deleted, plus
the manifest version it wrote: no request is added. Generation directories
count as pending above the region's merge progress (at the table version GC
read), as merged at or below it. WAL entries are counted, not listed: the
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

PENDING = "pending_generations"
MERGED = "merged_generations"
MANIFESTS = "region_manifests"
WAL = "wal_entries"
KINDS = (PENDING, MERGED, MANIFESTS, WAL)


@dataclass(frozen=True)
class RegionStored:
    """What GC's listing showed of one region: its merge progress, each generation directory
    (name, generation, objects, bytes), each manifest version (version, bytes), and the WAL
    entries past its last flush."""

    merged: int
    generation_dirs: tuple[tuple[str, int, int, int], ...]
    manifest_versions: tuple[tuple[int, int], ...]
    wal_to_replay: int

    @classmethod
    def listed(
        cls,
        dirs: Mapping[str, Iterable[ObjectInfo]],
        manifest_bytes: Mapping[int, int],
        merged: int,
        latest: RegionManifest,
    ) -> RegionStored:
        found = []
        for name, files in sorted(dirs.items()):
            generation = generation_from_dir_name(name)
            if generation is not None:
                sizes = [f.size for f in files]
                found.append((name, generation, len(sizes), sum(sizes)))
        return cls(merged, tuple(found), tuple(sorted(manifest_bytes.items())), latest.wal_entries_to_replay)


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
        deleted = set(p.manifest_delete) if ran else set()
        versions = {v: size for v, size in listed.manifest_versions if v not in deleted}
        version, size = written.get(p.region, (None, 0))
        if version is not None:
            versions[version] = size
        objects[MANIFESTS] += len(versions)
        sizes[MANIFESTS] += sum(versions.values())
        objects[WAL] += listed.wal_to_replay + p.wal_kept + (0 if ran else len(p.wal_delete))
    return {kind: Stored(objects[kind], None if kind == WAL else sizes[kind]) for kind in KINDS}
