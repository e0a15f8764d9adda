"""Which WAL entries GC may delete: covered ones, minus the tail, the young and the newest sentinel."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.format.naming import wal_entry_name
from memwal_core.format.regions import RegionManifest
from memwal_core.services.gc.rules import (
    WAL_FENCE_SENTINEL,
    WAL_NOT_FLUSHED,
    WAL_TAIL,
    WAL_TOO_YOUNG,
    GcPolicy,
)
from memwal_core.services.gc.wal import plan_wal
from memwal_core.storage.object_store import ObjectInfo

NOW = 1_000_000.0


def entry(epoch: int, *, sentinel: bool = False) -> bytes:
    """A WAL entry as Lance writes it: an Arrow IPC stream whose schema metadata carries the epoch."""
    meta = {b"writer_epoch": str(epoch).encode(), b"generation": b"1"}
    if sentinel:
        meta[b"fence_sentinel"] = b"true"
    schema = pa.schema([pa.field("id", pa.int64())], metadata=meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.table({"id": pa.array([], pa.int64())}, schema=schema))
    return sink.getvalue().to_pybytes()


def manifest(epoch: int, replay_after: int) -> RegionManifest:
    return RegionManifest(
        region="r",
        version=3,
        writer_epoch=epoch,
        replay_after_wal_entry_position=replay_after,
        wal_entry_position_last_seen=replay_after,
        current_generation=2,
        generations=(),
        spec_id=0,
        field_values=(),
        sealed=False,
        raw=b"",
    )


def plan(
    entries: dict[int, bytes], latest: RegionManifest, policy: GcPolicy, ages: dict[int, float] | None = None
) -> tuple[list[int], dict[str, int]]:
    infos = {p: ObjectInfo(f"wal/{p}", len(d), NOW - (ages or {}).get(p, 10_000)) for p, d in entries.items()}
    by_path = {f"wal/{wal_entry_name(p)}": d for p, d in entries.items()}
    return plan_wal(by_path.__getitem__, lambda path: f"mem://{path}", "wal", infos, latest, policy, NOW)


def test_covered_entries_go_except_the_tail() -> None:
    entries = {p: entry(1) for p in range(1, 11)}
    deleted, kept = plan(entries, manifest(1, 8), GcPolicy(grace_seconds=60, wal_tail=3))
    assert deleted == [1, 2, 3, 4, 5]
    assert kept == {WAL_NOT_FLUSHED: 2, WAL_TAIL: 3}


def test_young_entries_stay() -> None:
    entries = {p: entry(1) for p in range(1, 7)}
    deleted, kept = plan(entries, manifest(1, 6), GcPolicy(grace_seconds=60, wal_tail=0), ages={1: 5, 2: 59})
    assert deleted == [3, 4, 5, 6] and kept == {WAL_TOO_YOUNG: 2}


def test_the_newest_fence_sentinel_stays_but_older_ones_go() -> None:
    entries = {1: entry(1), 2: entry(1), 3: entry(2, sentinel=True), 4: entry(2), 5: entry(3, sentinel=True)}
    entries |= {6: entry(3), 7: entry(3)}
    deleted, kept = plan(entries, manifest(3, 7), GcPolicy(grace_seconds=60, wal_tail=1))
    assert deleted == [1, 2, 3, 4, 6] and kept == {WAL_TAIL: 1, WAL_FENCE_SENTINEL: 1}


def test_a_first_claim_has_no_sentinel_to_keep() -> None:
    entries = {p: entry(1) for p in range(1, 5)}
    deleted, kept = plan(entries, manifest(1, 4), GcPolicy(grace_seconds=0, wal_tail=0))
    assert deleted == [1, 2, 3, 4] and kept == {}


def test_an_unreadable_entry_is_named() -> None:
    entries = {1: b"not arrow", 2: entry(2, sentinel=True), 3: entry(2)}
    with pytest.raises(CorruptMetadataError, match="mem://wal/"):
        plan(entries, manifest(2, 3), GcPolicy(grace_seconds=0, wal_tail=0))
