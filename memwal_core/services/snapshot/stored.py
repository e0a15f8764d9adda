"""Reading back the region snapshot a table version stores (inline or in its own file)."""

from __future__ import annotations

from dataclasses import dataclass

from memwal_core.errors import NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.region_snapshot import RegionSnapshotRow, decode, from_arrow
from memwal_core.services.snapshot.service import snapshot_file_path
from memwal_core.table import MemWalTable


@dataclass(frozen=True)
class StoredSnapshot:
    """The region snapshot recorded at one table version."""

    table_version: int
    snapshot_ts_millis: int
    rows: tuple[RegionSnapshotRow, ...]


def read_stored_snapshot(table: MemWalTable, details: IndexDetails) -> StoredSnapshot:
    """The snapshot recorded in `details`; NotFoundError if that version has none."""
    if details.has_inline_snapshot:
        data = details.to_proto().inline_snapshots
        where = f"inline in {table.uri} version {details.table_version}"
    elif details.snapshot_ts_millis:
        path = snapshot_file_path(details.index_uuid)
        where = table.store.describe(path)
        data = table.store.read(path)
    else:
        raise NotFoundError(
            f"table {table.uri} version {details.table_version} has no region snapshot (run memwal snapshot)"
        )
    rows = tuple(from_arrow(decode(data, where=where)))
    return StoredSnapshot(details.table_version, details.snapshot_ts_millis, rows)
