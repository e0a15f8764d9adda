"""Rewriting the MemWAL index details safely (the region snapshot, the maintained-index list).

A `CreateIndex` that replaces `__lance_mem_wal` is taken verbatim, merge
progress included: built on version V and committed after a merge committed
V+1, it silently rolls that merge's progress back (format doc). So every
rewrite goes through `commit_details`: the caller holds the details lease,
which every merger takes around its commit, and re-read the details under it;
the commit is checked afterwards and a regression repaired with a
progress-only marked commit, in case a merger ignored or outlived the lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwal_core.errors import ConflictError
from memwal_core.format.naming import MEM_WAL_DETAILS_TYPE_URL, MEM_WAL_INDEX_NAME
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.lance_errors import is_stale_merge
from memwal_core.model.lease import Lease
from memwal_core.model.table import MemWalTable

if TYPE_CHECKING:
    import lance

log = logging.getLogger(__name__)

REPAIR_ATTEMPTS = 8


@dataclass(frozen=True)
class ProgressRepair:
    """A region whose merge progress a details rewrite rolled back, and what we restored."""

    region: str
    expected: int
    found: int
    table_version: int


@dataclass(frozen=True)
class DetailsCommit:
    """A verified details rewrite: the version it committed and any progress it had to restore."""

    version: int
    repairs: list[ProgressRepair]

    @property
    def table_version(self) -> int:
        """The table version once the rewrite and its repairs are in."""
        return max([self.version, *(r.table_version for r in self.repairs)])


def commit_details(
    table: MemWalTable,
    lease: Lease,
    dataset: lance.LanceDataset,
    details: pb.MemWalIndexDetails,
    new_uuid: str,
    *,
    undo: Callable[[], None] | None = None,
) -> DetailsCommit:
    """Commit `details` (read under `lease` at `dataset.version`), then verify and repair merge progress.

    `undo` removes what the caller wrote for this commit if the commit itself fails.
    """
    try:
        lease.ensure()
        version = rewrite_details(table, dataset, details, new_uuid)
    except BaseException:
        if undo is not None:
            undo()
        raise
    lost = progress_regressions(table, dataset.version, version)
    repairs = repair_progress(table, lost) if lost else []
    for r in repairs:
        log.error(
            "region %s: the details rewrite rolled merge progress back from %d to %d; restored",
            r.region,
            r.expected,
            r.found,
        )
    return DetailsCommit(version, repairs)


def rewrite_details(
    table: MemWalTable, dataset: lance.LanceDataset, details: pb.MemWalIndexDetails, new_uuid: str
) -> int:
    """Replace `__lance_mem_wal` with `details`, built on `dataset.version`; returns the new version."""
    import lance
    from lance.bitmap import Bitmap

    current = table.index_details(dataset.version)
    new_index = lance.Index(
        uuid=new_uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=dataset.version,
        fragment_ids=Bitmap(),
        index_version=0,
        index_details=(MEM_WAL_DETAILS_TYPE_URL, details.SerializeToString()),
    )
    old_index = lance.Index(
        uuid=current.index_uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=dataset.version,
        fragment_ids=Bitmap(),
        index_version=0,
    )
    committed = lance.LanceDataset.commit(
        dataset,
        lance.LanceOperation.CreateIndex(new_indices=[new_index], removed_indices=[old_index]),
        read_version=dataset.version,
        storage_options=table.storage_options.as_dict() or None,
    )
    return int(committed.version)


def progress_regressions(table: MemWalTable, read_version: int, version: int) -> dict[str, tuple[int, int]]:
    """Regions whose progress at `version` is below the highest recorded from `read_version` to just before it.

    Returns {region: (expected, found)}.
    """
    highest: dict[str, int] = {}
    for v in range(read_version, version):
        for region, generation in table.index_details(v).merged.items():
            highest[region] = max(highest.get(region, 0), generation)
    found = table.index_details(version).merged
    return {
        region: (generation, found.get(region, 0))
        for region, generation in sorted(highest.items())
        if found.get(region, 0) < generation
    }


def repair_progress(table: MemWalTable, lost: dict[str, tuple[int, int]]) -> list[ProgressRepair]:
    """Restore rolled-back progress with progress-only marked commits (an empty merge source).

    A region another merger has meanwhile moved past its expected generation
    needs nothing; Lance refuses the stale marker, and we re-read and retry
    the rest.
    """
    import pyarrow as pa
    from lance.mem_wal import CompactedSsTable

    primary_key = table.primary_key
    for _attempt in range(REPAIR_ATTEMPTS):
        dataset = table.dataset()
        recorded = table.index_details(dataset.version).merged
        pending = {r: (e, f) for r, (e, f) in lost.items() if recorded.get(r, 0) < e}
        if not pending:
            return []
        empty = pa.Table.from_pylist([], schema=dataset.schema)
        builder = (
            dataset.merge_insert(primary_key if len(primary_key) > 1 else primary_key[0])
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .mark_sstables_as_compacted([CompactedSsTable(r, e) for r, (e, _f) in sorted(pending.items())])
        )
        try:
            builder.execute(empty)
        except OSError as exc:
            if is_stale_merge(exc):
                continue
            raise
        return [ProgressRepair(r, e, f, int(dataset.version)) for r, (e, f) in sorted(pending.items())]
    raise ConflictError(
        f"table {table.uri}: could not restore merge progress of {sorted(lost)} "
        f"after {REPAIR_ATTEMPTS} attempts; run memwal snapshot again"
    )
