"""Keeping the details' `maintained_indexes` list in step with `maintain_all_indexes`.

Lance 13 (inside LanceDB 0.40) reads only the list: on a table whose list
is empty its vector search refuses to run ("the MemWAL LSM scanner requires
the vector index ... to be maintained by the write spec"). Lance 14 reads
the flag as "every index, including ones created later". So with the flag
set, memwal writes the list the rule of `model.indexes` wants (every user
index of a type Lance's MemTables hold): `memwal init` right after enabling
MemWAL, `memwal catchup` and the Dagster catch-up job for indexes created or
dropped since. Without the flag the list is the user's choice and stays.

A new index is listed only once it covers every flushed generation an
indexed LSM read would visit (those above `min(merged, caught_up)`): a
generation flushed before the index existed, or by a writer opened before,
carries no copy of it, and Lance's LSM vector search (LanceDB's and
pylance's) silently leaves that generation's rows out. Until then LanceDB
refuses the search loudly; a merge and a catch-up cover the old generations.

The rewrite replaces the MemWAL index, so it goes through `commit_details`
under the details lease, like a snapshot build: serialised with every merge
commit, verified afterwards, lost progress restored.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from memwal_core.errors import MemwalError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import MEM_WAL_DIR
from memwal_core.format.regions import RegionManifest
from memwal_core.model.details_commit import ProgressRepair, commit_details
from memwal_core.model.details_lease import details_lease
from memwal_core.model.indexes import MaintainedIndexes, read_maintained
from memwal_core.model.table import MemWalTable
from memwal_core.services.result import Failure
from memwal_core.services.snapshot.stored import regions_and_hints
from memwal_core.storage.lance_datasets import open_dataset


@dataclass(frozen=True)
class FlushedGeneration:
    """One flushed generation of one region."""

    region: str
    generation: int


# {index: [generation, ...]}: flushed generations an index to be listed does not cover yet.
Uncovered = dict[str, list[FlushedGeneration]]


@dataclass(frozen=True)
class ListUpdate:
    """Names added to and removed from the list; `table_version` None when nothing was committed.

    `waiting`: new indexes not listed yet, with the generations they do not cover.
    `unreadable_regions`: regions whose manifest cannot be read: coverage there is
    unknown, so new indexes wait.
    """

    added: list[str]
    removed: list[str]
    waiting: Uncovered = dataclasses.field(default_factory=dict)
    table_version: int | None = None
    progress_repairs: list[ProgressRepair] = dataclasses.field(default_factory=list)
    unreadable_regions: list[Failure] = dataclasses.field(default_factory=list)


def _generation_indexes(table: MemWalTable, region: str, path: str) -> set[str] | None:
    """Names of the indexes a flushed generation carries; None if it cannot be opened (GC raced us)."""
    uri = f"{table.uri}/{MEM_WAL_DIR}/{region}/{path}"
    try:
        return {d.name for d in open_dataset(uri, table.storage_options.as_dict()).describe_indices()}
    except (OSError, ValueError):
        return None


# Every region's latest manifest (None: no manifest yet), and the regions whose manifest cannot be read.
RegionManifests = tuple[dict[str, RegionManifest | None], list[Failure]]


def read_region_manifests(table: MemWalTable, details: IndexDetails) -> RegionManifests:
    """Every region's latest manifest, and the error of each region whose manifest cannot be read."""
    ids, hints = regions_and_hints(table, details)

    def read(region: str) -> RegionManifest | MemwalError | None:
        try:
            return table.read_region(region, hints.get(region))
        except MemwalError as exc:
            return exc

    manifests: dict[str, RegionManifest | None] = {}
    unreadable: list[Failure] = []
    for region, found in zip(ids, table.store.map(read, ids), strict=True):
        if isinstance(found, MemwalError):
            unreadable.append(Failure.of(found, region))
        else:
            manifests[region] = found
    return manifests, unreadable


def uncovered_generations(
    table: MemWalTable, details: IndexDetails, names: list[str], regions: RegionManifests | None = None
) -> tuple[Uncovered, list[Failure]]:
    """For each of `names`, the flushed generations above `min(merged, caught_up)` that lack it,
    and the regions whose manifest cannot be read (where coverage is unknown).

    `regions`: the region manifests if read already. Every such generation is opened once, in parallel.
    """
    if not names:
        return {}, []
    manifests, unreadable = regions if regions is not None else read_region_manifests(table, details)
    visits: list[tuple[str, int, str, list[str]]] = []
    for region, manifest in sorted(manifests.items()):
        for g in manifest.generations if manifest is not None else ():
            merged = details.merged_generation(region)
            visited = [
                name
                for name in names
                if g.generation > min(merged, details.index_catchup.get(name, {}).get(region, 0))
            ]
            if visited:
                visits.append((region, g.generation, g.path, visited))
    carried = table.store.map(lambda v: _generation_indexes(table, v[0], v[2]) or set(), visits)
    found: Uncovered = {}
    for (region, generation, _path, visited), has in zip(visits, carried, strict=True):
        for name in visited:
            if name not in has:
                found.setdefault(name, []).append(FlushedGeneration(region, generation))
    return {name: found[name] for name in names if name in found}, unreadable


def _read(table: MemWalTable, dataset: Any = None) -> tuple[Any, IndexDetails, MaintainedIndexes]:
    """The latest dataset (or `dataset`), its details and the rule's answer, all at one version."""
    dataset = dataset if dataset is not None else table.dataset()
    details = table.index_details(dataset.version)
    return dataset, details, read_maintained(table, details, dataset)


def _target(rule: MaintainedIndexes, held_back: set[str]) -> tuple[str, ...]:
    """The list to write: the rule's, without the new indexes held back."""
    return tuple(name for name in rule.wanted_list if name not in held_back)


def update_maintained_list(
    table: MemWalTable,
    *,
    dry_run: bool = False,
    dataset: Any = None,
    regions: RegionManifests | None = None,
) -> ListUpdate:
    """Rewrite the list when the rule finds it outdated.

    Coverage is read without the lease (it opens every generation a new index
    must cover); under the lease the rule is read again, and an index created
    meanwhile waits for the next run. `dataset` (the latest version, open
    already) and `regions` (the region manifests, read already) save reading
    them again.
    """
    _dataset, details, rule = _read(table, dataset)
    waiting, unreadable = uncovered_generations(table, details, rule.list_added, regions)
    checked = set(rule.list_added)
    held_back = set(waiting) | (checked if unreadable else set())
    target = _target(rule, held_back)
    if dry_run or target == rule.listed:
        added = [n for n in rule.list_added if n not in held_back]
        return ListUpdate(added, rule.list_removed, waiting, unreadable_regions=unreadable)
    with details_lease(table.store) as lease:
        dataset, details, rule = _read(table)
        target = _target(rule, held_back | (set(rule.list_added) - checked))
        if target == rule.listed:
            return ListUpdate([], [], waiting, unreadable_regions=unreadable)
        message = details.to_proto()
        del message.maintained_indexes[:]
        message.maintained_indexes.extend(target)
        commit = commit_details(table, lease, dataset, message, str(uuid.uuid4()))
    added = sorted(set(target) - set(rule.listed))
    removed = sorted(set(rule.listed) - set(target))
    return ListUpdate(added, removed, waiting, commit.table_version, commit.repairs, unreadable)
