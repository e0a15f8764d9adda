"""`retain`: remove old base-table versions (never tagged ones) with Lance's `cleanup_old_versions`.

Every merge leaves a table version behind, and the garbage collector keeps a
generation while any retained version still has lower merge progress for its
region (time travel to that version must still read correctly). So without
retention nothing can ever be collected. Like Iceberg's and Delta's expiry,
it refuses an age under one hour unless forced: a reader that opened an older
version (a long scan, an LSM read pinned to a version) would lose its files.

Lance 14 fact: cleanup deletes an external region snapshot file
(`_indices/{uuid}/index.lance`) together with the version that wrote it,
although later versions still point to it. When that happens, `retain`
rebuilds the snapshot at once and says so.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from memwal_core.arguments import Count, checked
from memwal_core.errors import BadInputError, NotFoundError, StorageError, quoted
from memwal_core.format.naming import LEASE_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.result import ServiceResult

if TYPE_CHECKING:
    from lance import LanceDataset

MIN_AGE = timedelta(hours=1)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# Longer than any retention a table needs, and well inside what a timedelta holds.
MAX_DURATION_SECONDS = 1000 * 365 * 86400


def parse_duration(text: str) -> timedelta:
    """`90m`, `2h`, `7d`, `3600s`, `1w` as a timedelta; BadInputError for anything else."""
    match = _DURATION.match(text.lower())
    if not match:
        raise BadInputError(
            f"duration {quoted(text)} is not a number with a unit s, m, h, d or w (e.g. 90m, 7d)"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise BadInputError(
            f"duration {quoted(text)} is longer than {MAX_DURATION_SECONDS // 86400 // 365} years"
        )
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class RetentionResult(ServiceResult):
    """The versions one retention run removed (`removed`) and kept; `new_version` is a rebuilt snapshot's."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"removed_versions": "removed"}

    older_than_seconds: float
    keep_versions: int | None
    versions_before: int
    removed: list[int]
    oldest_retained_version: int
    tagged_versions: list[int]
    bytes_removed: int
    data_files_removed: int
    snapshot_rebuilt: bool

    def computed_json(self) -> dict[str, Any]:
        return {"versions_removed": len(self.removed)}


def _due_versions(
    dataset: LanceDataset, older_than: timedelta, keep_versions: int | None, tagged: set[int]
) -> set[int]:
    """The versions Lance's cleanup must remove: older than the cutoff (taken before it runs, so
    never later than Lance's own), untagged, neither the latest nor among the `keep_versions` newest.
    """
    listed = sorted((int(v["version"]), cast(datetime, v["timestamp"])) for v in dataset.versions())
    newest = {version for version, _ in listed[-(keep_versions or 1) :]}
    return {
        version
        for version, stamp in listed
        if stamp < datetime.now(stamp.tzinfo) - older_than and version not in tagged | newest
    }


def _check_writable(table: MemWalTable, left: list[int]) -> None:
    """Refuse a cleanup that left versions it had to remove because the storage refused the deletes.

    Lance 14 ignores a refused delete: on a read-only table it removed nothing and
    reported success (docs/lance-issues.md). A write and delete of memwal's own
    raise instead; when they pass, Lance kept the versions for reasons of its own.
    """
    probe = f"{LEASE_DIR}/.retain-probe.{uuid.uuid4().hex}.tmp"
    try:
        table.store.write(probe, b"")
        table.store.delete(probe)
    except StorageError as exc:
        shown = ", ".join(map(str, left[:5])) + (", ..." if len(left) > 5 else "")
        raise StorageError(
            f"table {table.uri}: version(s) {shown} were due for removal but remain: "
            f"the storage refuses changes ({exc})"
        ) from exc


def _snapshot_file_gone(table: MemWalTable) -> bool:
    """Whether the latest details name a region snapshot stored in a file that can no longer be read."""
    from memwal_core.services.snapshot.stored import read_stored_snapshot

    details = table.index_details()
    if not details.snapshot_ts_millis or details.has_inline_snapshot:
        return False
    try:
        read_stored_snapshot(table, details)
    except NotFoundError:
        return True
    return False


@checked
def retain(
    table: MemWalTable,
    *,
    older_than: timedelta,
    keep_versions: Count | None = None,
    force: bool = False,
) -> RetentionResult:
    """Remove untagged versions older than `older_than`, keeping at least `keep_versions` newest.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     print(retain(table, older_than=parse_duration("7d")).to_json()["oldest_retained_version"])
    """
    if older_than < MIN_AGE and not force:
        raise BadInputError(
            f"refusing to remove versions younger than {MIN_AGE} (asked: {older_than}); "
            "readers may still use them: pass --force to do it anyway"
        )
    started = time.perf_counter()
    before = table.version_numbers()
    dataset = table.dataset()
    tagged = sorted({int(t["version"]) for t in dataset.tags.list().values()})
    due = _due_versions(dataset, older_than, keep_versions, set(tagged))
    stats = dataset.cleanup_old_versions(
        older_than=older_than, retain_versions=keep_versions, error_if_tagged_old_versions=False
    )
    after = table.version_numbers()
    if due & set(after):
        _check_writable(table, sorted(due & set(after)))
    rebuilt = _snapshot_file_gone(table)
    snapshot_version = None
    if rebuilt:
        from memwal_core.services.snapshot.service import build_snapshot

        snapshot_version = build_snapshot(table).new_version
    return RetentionResult(
        table=table.uri,
        read_version=dataset.version,
        new_version=snapshot_version,
        seconds=time.perf_counter() - started,
        older_than_seconds=older_than.total_seconds(),
        keep_versions=keep_versions,
        versions_before=len(before),
        removed=sorted(set(before) - set(after)),
        oldest_retained_version=after[0] if after else 0,
        tagged_versions=tagged,
        bytes_removed=int(stats.bytes_removed),
        data_files_removed=int(stats.data_files_removed),
        snapshot_rebuilt=rebuilt,
    )
