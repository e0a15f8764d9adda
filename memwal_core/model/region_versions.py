"""Each region's manifest version as the last region snapshot memwal built recorded it, in a
small JSON file of memwal's own (`_memwal_hints/region_versions.json`).

The snapshot Lance reads is a Lance file: decoding it loads Lance (0.4 s of CPU, with
pandas), which a command that only wants where each region's latest manifest starts
(`status`, a merge's plan, the sensor, catch-up's coverage) otherwise never needs. The
snapshot builder writes this copy after its commit, naming the snapshot it copies
(`snapshot_ts_millis`); a reader takes it only for that snapshot, and otherwise decodes
the snapshot itself. Like every hint, each version is verified (one HEAD) before it is
used, so a copy that is stale, lost or of another snapshot costs requests, never a wrong
answer.

The copy also holds a digest of the snapshot's rows: a build whose rows (every region's
version, WAL position, generations, merge progress) are the same, and whose file (if it
is stored in one) is still there, commits nothing: an idle table's scheduled snapshot
writes no table version and no file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from memwal_core.errors import MemwalError
from memwal_core.format.naming import REGION_VERSIONS_FILE
from memwal_core.storage.object_store import ObjectStore

log = logging.getLogger(__name__)


def write_region_versions(
    store: ObjectStore, snapshot_ts_millis: int, versions: Mapping[str, int], digest: str, path: str | None
) -> None:
    """Record the versions of the snapshot taken at `snapshot_ts_millis`, the digest of its rows and its
    file's path (None: inline), so the next build that finds the same rows, and the file still there,
    commits nothing; a failure is logged and dropped."""
    record = {
        "snapshot_ts_millis": snapshot_ts_millis,
        "regions": dict(sorted(versions.items())),
        "digest": digest,
        "path": path,
    }
    try:
        store.write(REGION_VERSIONS_FILE, json.dumps(record, separators=(",", ":")).encode())
    except MemwalError as exc:
        log.warning("the region versions of the snapshot were not copied (readers decode it): %s", exc)


def _record(store: ObjectStore, snapshot_ts_millis: int) -> dict[str, object] | None:
    """The copy, if it is of the snapshot taken at `snapshot_ts_millis`."""
    try:
        record = json.loads(store.read(REGION_VERSIONS_FILE))
    except (MemwalError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("snapshot_ts_millis") != snapshot_ts_millis:
        return None
    return record


def read_region_versions(store: ObjectStore, snapshot_ts_millis: int) -> dict[str, int] | None:
    """The versions recorded for the snapshot taken at `snapshot_ts_millis`; None when there is no
    copy of that snapshot (absent, unreadable, or another snapshot's)."""
    record = _record(store, snapshot_ts_millis)
    if record is None:
        return None
    regions = record.get("regions")
    if not isinstance(regions, dict):
        return None
    return {
        region: version
        for region, version in regions.items()
        if isinstance(region, str) and type(version) is int and version >= 1
    }


def read_rows_digest(store: ObjectStore, snapshot_ts_millis: int) -> tuple[str, str | None] | None:
    """The digest of the rows of the snapshot taken at `snapshot_ts_millis` and its file's path (None:
    inline), if its copy records them."""
    record = _record(store, snapshot_ts_millis)
    if record is None or not isinstance(digest := record.get("digest"), str):
        return None
    path = record.get("path")
    return digest, path if isinstance(path, str) else None
