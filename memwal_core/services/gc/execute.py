"""Carry out a GC plan, region by region, in an order that is safe to interrupt.

Per region: (1) a same-epoch manifest version without the pruned generations
(re-read and re-applied on a put-if-not-exists collision, like Lance's own
writer does); (2) directories past their grace period; (3) covered WAL
entries; (4) the version hint, then old manifest versions oldest first. A run
killed anywhere leaves unlisted directories (timed by the next run from the
manifest version that dropped them), a shorter contiguous run of manifest
versions, or nothing changed: every later run, reader and writer copes.
"""

from __future__ import annotations

from dataclasses import dataclass

from memwal_core.errors import AlreadyExistsError, ConflictError
from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, wal_entry_name
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.services.gc.plan import GenerationDir, RegionGcPlan
from memwal_core.storage.object_store import ObjectStore

# Lance's writer also gives up after 10 collisions.
MAX_PRUNE_ATTEMPTS = 10


@dataclass(frozen=True)
class RegionGcOutcome:
    """What GC changed in one region."""

    region: str
    pruned_in_version: int | None
    # The size of that version (0: none written).
    pruned_manifest_bytes: int
    deleted_dirs: tuple[GenerationDir, ...]
    objects_deleted: int
    # Bytes of the generation directories deleted (as listed just before deleting them).
    bytes_deleted: int
    wal_deleted: int
    manifest_versions_deleted: int


def prune_generations(manifests: RegionManifestStore, paths: set[str]) -> tuple[int, int] | None:
    """Write a manifest version that no longer lists `paths`; its version and size, or None if none
    listed them.

    The epoch is copied, never bumped: a bump would fence the live writer.
    """
    for _ in range(MAX_PRUNE_ATTEMPTS):
        current = manifests.read_latest()
        message = current.to_proto()
        keep = [s for s in message.sstables if s.path not in paths]
        if len(keep) == len(message.sstables):
            return None
        del message.sstables[:]
        message.sstables.extend(keep)
        message.version = current.version + 1
        data = message.SerializeToString()
        try:
            manifests.write_next(current, data)
        except AlreadyExistsError:
            continue  # the writer flushed meanwhile: re-apply on its version
        return current.version + 1, len(data)
    raise ConflictError(
        f"region {manifests.region}: manifest kept changing; gave up pruning after {MAX_PRUNE_ATTEMPTS} attempts"
    )


def execute_region(store: ObjectStore, manifests: RegionManifestStore, plan: RegionGcPlan) -> RegionGcOutcome:
    """Apply one region's plan (see the module docstring for the order)."""
    region_dir = f"{MEM_WAL_DIR}/{plan.region}"
    pruned = prune_generations(manifests, {d.path for d in plan.prune}) if plan.prune else None
    pruned_in, pruned_bytes = pruned or (None, 0)
    # Every directory's objects in shared batch deletes, then the WAL entries and abandoned uploads.
    trees = (
        store.delete_trees([f"{region_dir}/{d.path}" for d in plan.deleted_dirs]) if plan.deleted_dirs else []
    )
    objects = sum(len(tree) for tree in trees)
    wal_dir = f"{region_dir}/{REGION_WAL_DIR}"
    wal = [f"{wal_dir}/{wal_entry_name(p)}" for p in plan.wal_delete] + list(plan.wal_temp_delete)
    if wal:
        store.delete_many(wal)
    if plan.manifest_delete:
        # Readers start probing at the hint: it must name a version that stays.
        manifests.write_hint(max(pruned_in or 0, plan.manifest_version))
        for version in plan.manifest_delete:  # one at a time, oldest first: never a gap
            store.delete(manifests.path(version))
    return RegionGcOutcome(
        region=plan.region,
        pruned_in_version=pruned_in,
        pruned_manifest_bytes=pruned_bytes,
        deleted_dirs=plan.deleted_dirs,
        objects_deleted=objects
        + len(plan.wal_delete)
        + len(plan.manifest_delete)
        + len(plan.wal_temp_delete),
        bytes_deleted=sum(info.size for tree in trees for info in tree),
        wal_deleted=len(plan.wal_delete),
        manifest_versions_deleted=len(plan.manifest_delete),
    )
