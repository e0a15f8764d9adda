"""Reading back the region snapshot a table version stores (inline or in its own file).

Lance gives `__lance_mem_wal` a new index id at every commit that touches
the details (every merge), but carries `snapshot_ts_millis` and the inline
bytes over. A snapshot file lives under the id of the commit that wrote it,
so we find that commit by walking back while the snapshot stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from memwal_core.errors import MemWalNotEnabledError, NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import region_snapshot_path
from memwal_core.format.region_snapshot import RegionSnapshotRow, decode, from_arrow
from memwal_core.model.table import MemWalTable


@dataclass(frozen=True)
class StoredSnapshot:
    """The region snapshot recorded at one table version."""

    table_version: int
    snapshot_ts_millis: int
    rows: tuple[RegionSnapshotRow, ...]


def _writing_commit(table: MemWalTable, details: IndexDetails) -> IndexDetails:
    """The details of the commit that wrote the (file) snapshot `details` carries."""
    writer = details
    while writer.table_version > 1:
        try:
            previous = table.index_details(writer.table_version - 1)
        except (NotFoundError, MemWalNotEnabledError):
            break
        if previous.snapshot_ts_millis != details.snapshot_ts_millis or previous.has_inline_snapshot:
            break
        writer = previous
    return writer


def read_stored_snapshot(table: MemWalTable, details: IndexDetails) -> StoredSnapshot:
    """The snapshot recorded in `details`; NotFoundError if that version has none (or its file is gone)."""
    if details.has_inline_snapshot:
        data = details.to_proto().inline_snapshots
        where = f"inline in {table.uri} version {details.table_version}"
    elif details.snapshot_ts_millis:
        path = region_snapshot_path(_writing_commit(table, details).index_uuid)
        where = table.store.describe(path)
        try:
            data = table.store.read(path)
        except NotFoundError:
            raise NotFoundError(
                f"region snapshot file {where} of table version {details.table_version} is gone "
                "(Lance's cleanup of old versions removes it); run memwal snapshot again"
            ) from None
    else:
        raise NotFoundError(
            f"table {table.uri} version {details.table_version} has no region snapshot (run memwal snapshot)"
        )
    rows = tuple(from_arrow(decode(data, where=where)))
    return StoredSnapshot(details.table_version, details.snapshot_ts_millis, rows)
