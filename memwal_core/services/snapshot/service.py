"""`snapshot`: write the MemWAL index region snapshot, without ever losing merge progress.

Plan (read every region, outside any lock), then under the index-details
lease: re-read merge progress, encode the rows as a Lance file (inline in
the details up to a threshold of regions, else `_indices/{uuid}/index.lance`),
commit the details with progress carried over unchanged, and verify that no
region's progress went down, repairing it if it did. A build that finds the
rows the stored snapshot holds (memwal's copy of it records their digest)
commits nothing: watching an idle table costs no table version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from memwal_core.arguments import Amount, Seconds, checked
from memwal_core.errors import AlreadyExistsError, StorageError
from memwal_core.format.naming import region_snapshot_path
from memwal_core.format.region_snapshot import RegionSnapshotRow, encode, region_field_types, to_arrow
from memwal_core.model.details_commit import ProgressRepair, commit_details
from memwal_core.model.details_lease import DEFAULT_DETAILS_LEASE_TTL, details_lease
from memwal_core.model.outcomes import SNAPSHOT
from memwal_core.model.region_versions import read_rows_digest, write_region_versions
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import DEFAULT_INLINE_THRESHOLD
from memwal_core.services.outcome import recorded
from memwal_core.services.result import ServiceResult
from memwal_core.services.snapshot.plan import SnapshotPlan, plan_snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotResult(ServiceResult):
    """What one snapshot build wrote; `new_version` is the commit of the new details."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {
        "table_version": "new_version",
        "seconds_total": "seconds",
    }

    regions: int
    storage: str
    path: str | None
    snapshot_bytes: int
    snapshot_ts_millis: int
    stale_wal_hints: int
    refreshed_hints: list[str]
    progress_repairs: list[ProgressRepair]
    seconds_read: float
    seconds_commit: float
    requests: dict[str, int] = field(default_factory=dict)
    # Nothing changed since the stored snapshot (the same rows): nothing was committed or written.
    unchanged: bool = False


def _refresh_hint(table: MemWalTable, region: str, position: int) -> int | None:
    """Write a same-epoch manifest version with `wal_entry_position_last_seen = position`.

    Best effort: a version taken by the writer meanwhile means it is live and
    keeps its own hint. Returns the version written, or None.
    """
    store = table.region_store(region)
    try:
        manifest = store.read_latest()
        if manifest.wal_entry_position_last_seen >= position:
            return None
        message = manifest.to_proto()
        message.version = manifest.version + 1
        message.wal_entry_position_last_seen = position
        store.write_next(manifest, message.SerializeToString())
    except (AlreadyExistsError, StorageError) as exc:
        log.info("region %s: WAL hint not refreshed (%s)", region, exc)
        return None
    return manifest.version + 1


def _refresh_hints(table: MemWalTable, plan: SnapshotPlan) -> tuple[SnapshotPlan, list[str]]:
    """Refresh the stale WAL hints the plan found; the rows name the versions written."""
    stale = [r for r in plan.regions if r.region in set(plan.stale_wal_hints)]
    versions = table.store.map(
        lambda r: _refresh_hint(table, r.region, r.wal_entry_position_last_seen), stale
    )
    written = {r.region: v for r, v in zip(stale, versions, strict=True) if v is not None}
    rows = tuple(
        dataclasses.replace(r, version=written[r.region]) if r.region in written else r for r in plan.regions
    )
    return dataclasses.replace(plan, regions=rows), sorted(written)


def rows_digest(rows: Sequence[RegionSnapshotRow], *, inline: bool) -> str:
    """What a snapshot records, as a digest: equal rows (merge progress included) stored the same way."""
    return hashlib.sha256(repr((inline, tuple(rows))).encode()).hexdigest()


def _current(table: MemWalTable, snapshot_ts_millis: int, digest: str) -> bool:
    """Whether the stored snapshot has these rows, and its file (if any) is still there: Lance's cleanup
    of the version that wrote it removes it (`memwal retain` then builds the snapshot again)."""
    stored = read_rows_digest(table.store, snapshot_ts_millis)
    if stored is None or stored[0] != digest:
        return False
    return stored[1] is None or table.store.exists(stored[1])


def _unchanged(
    table: MemWalTable,
    plan: SnapshotPlan,
    snapshot_ts_millis: int,
    version: int,
    started: float,
    read_done: float,
) -> SnapshotResult:
    """The result of a build that found the stored snapshot current."""
    finished = time.perf_counter()
    return SnapshotResult(
        table=table.uri,
        read_version=version,
        new_version=version,
        seconds=finished - started,
        regions=len(plan.regions),
        storage="inline" if plan.inline else "file",
        path=None,
        snapshot_bytes=0,
        snapshot_ts_millis=snapshot_ts_millis,
        stale_wal_hints=len(plan.stale_wal_hints),
        refreshed_hints=[],
        progress_repairs=[],
        seconds_read=read_done - started,
        seconds_commit=finished - read_done,
        requests=table.store.stats.snapshot(),
        unchanged=True,
    )


@checked
@recorded(SNAPSHOT)
def build_snapshot(
    table: MemWalTable,
    *,
    inline_threshold: Amount = DEFAULT_INLINE_THRESHOLD,
    refresh_hints: bool = False,
    lease_ttl: Seconds = DEFAULT_DETAILS_LEASE_TTL,
    lease_wait: Seconds | None = None,
) -> SnapshotResult:
    """Build and commit the region snapshot of every region.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     print(build_snapshot(table).to_json()["regions"])
    """
    started = time.perf_counter()
    table.store.stats.reset()
    plan = plan_snapshot(table, inline_threshold=inline_threshold)
    refreshed: list[str] = []
    if refresh_hints and plan.stale_wal_hints:
        plan, refreshed = _refresh_hints(table, plan)
    read_done = time.perf_counter()
    with details_lease(table.store, ttl=lease_ttl, wait=lease_wait) as lease:
        dataset = table.dataset()
        details = table.index_details(dataset.version)
        message = details.to_proto()
        rows = [
            dataclasses.replace(r, merged_generation=details.merged_generation(r.region))
            for r in plan.regions
        ]
        digest = rows_digest(rows, inline=plan.inline)
        if details.snapshot_ts_millis and _current(table, details.snapshot_ts_millis, digest):
            return _unchanged(
                table, plan, details.snapshot_ts_millis, int(dataset.version), started, read_done
            )
        data = encode(to_arrow(rows, region_field_types(message.sharding_specs)))
        message.snapshot_ts_millis = plan.read_at_millis
        message.num_shards = len(rows)
        new_uuid = str(uuid.uuid4())
        path: str | None = None
        if plan.inline:
            message.inline_snapshots = data
        else:
            message.ClearField("inline_snapshots")
            path = region_snapshot_path(new_uuid)
            table.store.put_if_not_exists(path, data)

        def undo() -> None:
            if path is not None:
                with contextlib.suppress(StorageError):
                    table.store.delete(path)

        commit = commit_details(table, lease, dataset, message, new_uuid, undo=undo)
    write_region_versions(table.store, plan.read_at_millis, {r.region: r.version for r in rows}, digest, path)
    finished = time.perf_counter()
    return SnapshotResult(
        table=table.uri,
        read_version=int(dataset.version),
        new_version=commit.table_version,
        seconds=finished - started,
        regions=len(rows),
        storage="inline" if plan.inline else "file",
        path=path,
        snapshot_bytes=len(data),
        snapshot_ts_millis=plan.read_at_millis,
        stale_wal_hints=len(plan.stale_wal_hints),
        refreshed_hints=refreshed,
        progress_repairs=commit.repairs,
        seconds_read=read_done - started,
        seconds_commit=finished - read_done,
        requests=table.store.stats.snapshot(),
    )
