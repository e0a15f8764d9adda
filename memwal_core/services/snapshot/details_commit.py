"""Rewriting the MemWAL index details safely.

A `CreateIndex` that replaces `__lance_mem_wal` is taken verbatim, merge
progress included: built on version V and committed after a merge committed
V+1, it silently rolls that merge's progress back (format doc). The caller
holds the details lease, which every merger takes around its commit; this
module also checks every commit afterwards and repairs a regression with a
progress-only marked commit, in case a merger ignored or outlived the lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwal_core.errors import ConflictError
from memwal_core.format.naming import MEM_WAL_DETAILS_TYPE_URL, MEM_WAL_INDEX_NAME
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.services.merge.commit import STALE_MARKER
from memwal_core.table import MemWalTable

if TYPE_CHECKING:
    import lance

REPAIR_ATTEMPTS = 8


@dataclass(frozen=True)
class ProgressRepair:
    """A region whose merge progress a details rewrite rolled back, and what we restored."""

    region: str
    expected: int
    found: int
    table_version: int


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
            if STALE_MARKER in str(exc):
                continue
            raise
        return [ProgressRepair(r, e, f, int(dataset.version)) for r, (e, f) in sorted(pending.items())]
    raise ConflictError(
        f"table {table.uri}: could not restore merge progress of {sorted(lost)} "
        f"after {REPAIR_ATTEMPTS} attempts; run memwal snapshot again"
    )
