"""Reading back the region snapshot a table version stores (inline or in its own file).

Lance gives `__lance_mem_wal` a new index id at every commit that touches
the details (every merge), but carries `snapshot_ts_millis` and the inline
bytes over. A snapshot file lives under the id of the commit that wrote it,
so we find that commit by walking back while the snapshot stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwal_core.errors import MemwalError, MemWalNotEnabledError, NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import region_snapshot_path
from memwal_core.format.regions import RegionManifest
from memwal_core.model.region_versions import read_region_versions
from memwal_core.model.table import MemWalTable
from memwal_core.storage.lance_datasets import load_lance_meanwhile
from memwal_core.storage.object_store import side_call

if TYPE_CHECKING:
    from memwal_core.format.region_snapshot import RegionSnapshotRow


@dataclass(frozen=True)
class StoredSnapshot:
    """The region snapshot recorded at one table version."""

    table_version: int
    snapshot_ts_millis: int
    rows: tuple[RegionSnapshotRow, ...]


# Hints are worth this many table manifest reads (each is one request) to find the snapshot file.
HINT_WALK_LIMIT = 8


def _writing_commit(table: MemWalTable, details: IndexDetails, *, limit: int | None = None) -> IndexDetails:
    """The details of the commit that wrote the (file) snapshot `details` carries.

    NotFoundError when `limit` steps back do not reach it.
    """
    writer = details
    while writer.table_version > 1:
        if limit is not None and details.table_version - writer.table_version >= limit:
            raise NotFoundError(f"the region snapshot of table {table.uri} is more than {limit} commits old")
        try:
            previous = table.index_details(writer.table_version - 1)
        except (NotFoundError, MemWalNotEnabledError):
            break
        if previous.snapshot_ts_millis != details.snapshot_ts_millis or previous.has_inline_snapshot:
            break
        writer = previous
    return writer


def read_stored_snapshot(
    table: MemWalTable, details: IndexDetails, *, walk_limit: int | None = None
) -> StoredSnapshot:
    """The snapshot recorded in `details`; NotFoundError if that version has none (or its file is gone)."""
    # A Lance file, read with Arrow and Lance: loaded only where a snapshot is stored.
    from memwal_core.format.region_snapshot import decode, from_arrow

    if details.has_inline_snapshot:
        data = details.to_proto().inline_snapshots
        where = f"inline in {table.uri} version {details.table_version}"
    elif details.snapshot_ts_millis:
        load_lance_meanwhile()  # the file is a Lance file: its import overlaps finding and reading it
        path = region_snapshot_path(_writing_commit(table, details, limit=walk_limit).index_uuid)
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


def snapshot_hints(table: MemWalTable, details: IndexDetails) -> dict[str, int]:
    """Each region's manifest version as the stored snapshot recorded it: where reading its latest starts.

    Only hints (`MemWalTable.read_regions` verifies each with one HEAD), so any snapshot that
    cannot be read cheaply gives none: every region then reads its version hint file instead.
    memwal's copy of the snapshot's versions is read first: it needs no Lance to decode.
    """
    if details.snapshot_ts_millis:
        copied = read_region_versions(table.store, details.snapshot_ts_millis)
        if copied is not None:
            return copied
    try:
        stored = read_stored_snapshot(table, details, walk_limit=HINT_WALK_LIMIT)
    except MemwalError:
        return {}
    return {row.region: row.version for row in stored.rows}


def regions_and_hints(
    table: MemWalTable, details: IndexDetails, regions: Iterable[str] | None = None
) -> tuple[list[str], dict[str, int]]:
    """The named regions (default: every region listed) and the snapshot's versions, read at once: the
    listing and the snapshot's read do not wait on each other."""
    with side_call(lambda: snapshot_hints(table, details)) as hints:
        ids = list(regions) if regions is not None else table.region_ids()
    return ids, hints.result()


def newest_hints(*sources: Mapping[str, int]) -> dict[str, int]:
    """Per region, the newest manifest version any of `sources` names: versions only grow, so the
    newest is the closest to the latest (each is a hint all the same: the read verifies it)."""
    hints: dict[str, int] = {}
    for source in sources:
        for region, version in source.items():
            hints[region] = max(version, hints.get(region, version))
    return hints


def read_hinted(
    table: MemWalTable, details: IndexDetails, regions: Iterable[str] | None = None
) -> dict[str, RegionManifest | None]:
    """Every region's (or the named regions') latest manifest, starting from the snapshot's versions."""
    ids, hints = regions_and_hints(table, details, regions)
    return table.read_regions(ids, known=hints)
