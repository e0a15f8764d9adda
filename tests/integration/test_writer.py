"""MemWalWriter: routed writes read back through Lance's LSM reader, crashes, fencing and bad rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from memwal_core.errors import BadInputError, FencedError, SchemaError, StorageError, UncertainWriteError
from memwal_core.model.region_directory import region_id_for
from memwal_core.model.routing import region_spec_of
from memwal_core.model.table import MemWalTable
from memwal_core.services.writer import MemWalWriter
from tests.support.paths import PROJECT_ROOT
from tests.support.schema import SCHEMA, key_field, lsm_rows, make_table
from tests.support.tables import tree_digest


def test_routed_writes_read_back_equal_the_model(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t")
    model = {0: ("a", 0.0), 1: ("b", 1.0), 2: ("c", 2.0)}
    with MemWalWriter(uri, max_memtable_rows=700) as writer:
        for round_ in range(3):
            keys = list(range(round_ * 500, round_ * 500 + 1500))  # overlaps: updates and inserts
            writer.put(
                {"id": keys, "name": [f"r{round_}-{k}" for k in keys], "score": [float(k) for k in keys]}
            )
            model.update({k: (f"r{round_}-{k}", float(k)) for k in keys})
            doomed = keys[::7]
            writer.delete(doomed)
            for k in doomed:
                model.pop(k, None)
        writer.put(
            pa.table({"id": pa.array([7], pa.int32()), "name": ["cast"], "score": [1]})
        )  # cast on the way
        model[7] = ("cast", 1.0)
        stats = writer.stats()
    assert lsm_rows(uri) == model
    assert len(stats) == 4 and all(s["rows_put"] > 0 and s["put_count"] > 0 for s in stats.values())

    table = MemWalTable.open(uri)
    spec = region_spec_of(table.latest)
    assert spec is not None
    for region, manifest in table.read_regions().items():
        assert manifest is not None and manifest.spec_id == spec.spec_id
        assert manifest.generation_numbers, f"region {region} flushed nothing"
        keys = pa.concat_tables(
            lance.dataset(f"{uri}/_mem_wal/{region}/{g.path}").to_table(columns=["id"])
            for g in manifest.generations
        )
        codes, values = spec.route(keys)
        assert {values[c] for c in codes.tolist()} == {manifest.field_values}, (
            f"region {region} holds foreign keys"
        )


def test_a_created_region_is_claimed_by_lance_with_its_value_kept(tmp_path: Path) -> None:
    """Lance's own writer claims a region we created and keeps its spec id and value."""
    uri = make_table(tmp_path / "t")
    with MemWalWriter(uri) as writer:
        writer.put({"id": [10], "name": ["x"], "score": [1.0]})
        (region,) = writer.regions
    table = MemWalTable.open(uri)
    first = table.region_store(region).read(1)
    assert (first.writer_epoch, first.field_values) == (0, ((("bucket", first.field_values[0][1]),)))
    assert region == region_id_for(first.spec_id, first.field_values)
    with lance.dataset(uri).mem_wal_writer(region) as native:
        native.put(pa.table({"id": [11], "name": ["y"], "score": [2.0]}, schema=SCHEMA))
    latest = table.region_store(region).read_latest()
    assert latest.writer_epoch == 2
    assert (latest.spec_id, latest.field_values) == (first.spec_id, first.field_values)
    assert len(latest.generations) == 2


def test_identity_regions_one_per_value(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t", identity_column="id")
    with MemWalWriter(uri) as writer:
        writer.put({"id": [5, 6, 5], "name": ["x", "y", "z"], "score": [1.0, 2.0, 3.0]})
    table = MemWalTable.open(uri)
    values = sorted(m.field_values for m in table.read_regions().values() if m is not None)
    assert values == [(("bucket", (5).to_bytes(8, "little")),), (("bucket", (6).to_bytes(8, "little")),)]
    assert lsm_rows(uri)[5] == ("z", 3.0)


@pytest.mark.parametrize("reopen_rows", [None, 50], ids=["same-limits", "smaller-memtable"])
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path, reopen_rows: int | None) -> None:
    """The next writer replays the killed one's WAL, even when that WAL is over its own MemTable
    limit (Lance refuses such a replay; MemWalWriter replays it once with larger limits)."""
    uri = make_table(tmp_path / "t", unsharded=True)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "LANCE_LOG": "error"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.writer_proc", uri, "200"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        start_new_session=True,
    )
    acknowledged = -1
    try:
        assert process.stdout is not None
        while acknowledged < 15:
            line = process.stdout.readline()
            assert line, "the writer process died early"
            acknowledged = int(line)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    with MemWalWriter(uri, max_memtable_rows=reopen_rows) as writer:  # claims: replays the killed one's WAL
        writer.put({"id": [-1], "name": ["after"], "score": [0.0]})
    rows = lsm_rows(uri)
    lost = [k for r in range(acknowledged + 1) for k in range(r * 200, (r + 1) * 200) if k not in rows]
    assert not lost, f"{len(lost)} acknowledged keys lost, first {lost[0]}"
    assert rows[-1] == ("after", 0.0)


def test_a_fenced_writer_gets_a_clear_error_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t", unsharded=True)
    old = MemWalWriter(uri)
    old.put({"id": [100, 101], "name": ["old", "old"], "score": [1.0, 1.0]})
    with MemWalWriter(uri) as new:
        new.put({"id": [200], "name": ["new"], "score": [2.0]})
        with pytest.raises(FencedError, match=r"region [0-9a-f-]+: this writer was fenced"):
            old.put({"id": [102], "name": ["lost"], "score": [3.0]})
        with pytest.raises(FencedError):  # and stays fenced: it never re-claims by itself
            old.put({"id": [103], "name": ["lost"], "score": [3.0]})
    old.close()
    rows = lsm_rows(uri)
    assert rows[100] == ("old", 1.0) and rows[200] == ("new", 2.0) and 102 not in rows and 103 not in rows
    (region,) = MemWalTable.open(uri).region_ids()
    with MemWalWriter(uri, region=region) as pinned:  # an explicit claim fences without writing
        pinned.put({"id": [300], "name": ["pinned"], "score": [3.0]})
        with MemWalWriter(uri, region=region) as claimer:
            assert claimer.claim() == region
            with pytest.raises(FencedError):
                pinned.put({"id": [301], "name": ["lost"], "score": [3.0]})
    assert lsm_rows(uri)[300] == ("pinned", 3.0)


def test_a_fenced_writer_that_flushes_does_not_claim_the_region_back(tmp_path: Path) -> None:
    """Lance's close of a fenced writer fails; settling that region would fence its new owner."""
    uri = make_table(tmp_path / "t", unsharded=True)
    old = MemWalWriter(uri)
    old.put({"id": [100], "name": ["old"], "score": [1.0]})
    with MemWalWriter(uri) as new:
        new.put({"id": [200], "name": ["new"], "score": [2.0]})
        (region,) = MemWalTable.open(uri).region_ids()
        epoch = MemWalTable.open(uri).read_regions()[region].writer_epoch
        with pytest.raises(FencedError):
            old.flush()
        assert MemWalTable.open(uri).read_regions()[region].writer_epoch == epoch
        new.put({"id": [201], "name": ["new"], "score": [2.0]})  # still the region's writer
    old.close()
    rows = lsm_rows(uri)
    assert rows[100] == ("old", 1.0) and rows[200] == ("new", 2.0) and rows[201] == ("new", 2.0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": [1, None], "name": ["a", "b"], "score": [1.0, 2.0]}, "column id has 1 null"),
        ({"name": ["a"], "score": [1.0]}, "column id is missing"),
        ({"id": ["one"], "name": ["a"], "score": [1.0]}, "column id: cannot cast string to int64"),
        ({"id": [1], "name": ["a"], "score": ["high"]}, "column score: cannot cast string to double"),
        ({"id": [1], "name": ["a"], "score": [1.0], "extra": [1]}, "column extra is not in the table schema"),
    ],
    ids=["null-key", "missing-key", "key-type", "value-type", "extra-column"],
)
def test_bad_rows_are_refused_before_anything_is_written(tmp_path: Path, data: Any, message: str) -> None:
    uri = make_table(tmp_path / "t")
    before = tree_digest(tmp_path / "t")
    with MemWalWriter(uri) as writer, pytest.raises(SchemaError, match=message):
        writer.put(data)
    assert tree_digest(tmp_path / "t") == before


@pytest.mark.parametrize(
    ("lance_message", "error"),
    [
        ("Writer fenced (peer claimed epoch): local epoch 1 < stored epoch 2 for shard x", FencedError),
        (
            "LanceError(IO): Failed to claim shard x (version 3): another writer claimed epoch 2 (>= our "
            "target 2): Retryable commit conflict for version 3: Manifest version 3 already exists for shard x",
            FencedError,
        ),
        (
            "LanceError(IO): Failed to claim shard x (version 3): another writer claimed epoch 2 (>= our "
            "target 2): LanceError(IO): Failed to write manifest version 3 for shard x: Generic S3 error: "
            "Error performing PUT http://127.0.0.1:1/m in 2s - HTTP error: error sending request",
            UncertainWriteError,
        ),
        (
            "LanceError(IO): Failed to claim shard x (version 3): another writer claimed epoch 3 (>= our "
            "target 2): LanceError(IO): Failed to write manifest version 3 for shard x: error sending request",
            FencedError,
        ),
        (
            "Writer fenced (persistence failure): WAL position 12 for shard x was taken after a failed PUT; "
            "in-memory state may diverge from the durable WAL, reopen to replay",
            UncertainWriteError,
        ),
        ("Invalid user input: batch 0 does not match the base table schema", BadInputError),
        ("LanceError(IO): connection reset by peer", StorageError),
        (
            "Writer fenced (persistence failure): LanceError(IO): failed to write .../wal/0101.arrow: "
            "No space left on device (os error 28)",
            StorageError,
        ),
        (
            "Failed to claim shard x after 16 retries due to manifest contention: LanceError(IO): "
            "Generic LocalFileSystem error: Permission denied (os error 13)",
            StorageError,
        ),
    ],
    ids=[
        "fenced",
        "claim-race",
        "claim-unanswered",
        "claim-overtaken",
        "lost-response",
        "bad-rows",
        "storage",
        "disk-full",
        "read-only",
    ],
)
def test_native_errors_are_classified(lance_message: str, error: type[Exception]) -> None:
    """Lance's writer raises OSError for everything; callers act on the kind (messages as Lance 14 words them)."""
    from memwal_core.services.writer import _native_error

    classified = _native_error("r1", OSError(lance_message))
    assert type(classified) is error and str(classified).startswith("region r1: ")
    assert "another writer" not in str(classified) or error is FencedError
    if "Permission denied" in lance_message:
        assert "the store refused the write (Permission denied" in str(classified)


def test_put_all_gathers_small_parts_into_few_writes(tmp_path: Path) -> None:
    """Every durable write waits for a WAL flush: 50 ten-row parts become one write, not 50."""
    uri = make_table(tmp_path / "t", unsharded=True)
    parts = [
        {"id": [i * 10 + j for j in range(10)], "name": ["p"] * 10, "score": [1.0] * 10} for i in range(50)
    ]
    with MemWalWriter(uri, max_memtable_rows=300) as writer:
        assert writer.put_all(parts) == 500
        (stats,) = writer.stats().values()
    assert stats["put_count"] == 2 and stats["rows_put"] == 500  # 300 rows, then the last 200
    assert len(lsm_rows(uri)) == 500  # ids 0-2 replace the base rows


@pytest.mark.parametrize("user_buffer", [None, 10 << 20], ids=["default", "user-set"])
def test_a_durable_put_writes_its_wal_entry_before_returning(tmp_path: Path, user_buffer: int | None) -> None:
    """By default each durable put writes its own WAL entry at once instead of waiting for Lance's
    interval tick; a WAL buffer size the user sets is passed through (then puts wait for ticks)."""
    uri = make_table(tmp_path / "t", unsharded=True)
    regions = tmp_path / "t" / "_mem_wal"
    interval = 2.0
    with MemWalWriter(
        uri, max_wal_flush_interval_ms=int(interval * 1000), max_wal_buffer_size=user_buffer
    ) as writer:
        started = time.monotonic()
        for i in range(3):
            before = set(regions.glob("*/wal/*.arrow"))
            writer.put({"id": [100 + i], "name": ["w"], "score": [1.0]})
            assert len(set(regions.glob("*/wal/*.arrow")) - before) == 1  # stored when put returns
        waited = time.monotonic() - started
        # Polled: Lance counts a WAL flush only after waking the put it made durable (docs/lance-issues.md).
        deadline = time.monotonic() + 1.0
        (stats,) = writer.stats().values()
        while stats["wal_flush_count"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
            (stats,) = writer.stats().values()
        assert stats["put_count"] == 3 and stats["wal_flush_count"] == 3
    # Three puts a tick apart take at least two intervals; written at once, they take milliseconds.
    assert (waited >= interval) == (user_buffer is not None), waited


def test_a_pinned_writer_refuses_keys_of_other_regions(tmp_path: Path) -> None:
    """A key that routes elsewhere, put through a writer pinned to a region, is refused with nothing written.

    Accepted, it would sit in two regions: the LSM scan returns it twice, the
    point lookup the older value, and merge refuses both regions.
    """
    uri = make_table(tmp_path / "t")
    with MemWalWriter(uri) as writer:
        writer.put({"id": list(range(40)), "name": ["a"] * 40, "score": [0.0] * 40})
        regions = writer.regions
    table = MemWalTable.open(uri)
    spec = region_spec_of(table.latest)
    assert spec is not None and len(regions) > 1
    codes, values = spec.route(pa.table({"id": pa.array(range(40), SCHEMA.field("id").type)}))
    served = {region: m.field_values for region, m in table.read_regions().items() if m is not None}
    pinned = regions[0]
    mine = [k for k, c in zip(range(40), codes.tolist(), strict=True) if values[c] == served[pinned]]
    other = next(k for k in range(40) if k not in mine)
    before = tree_digest(tmp_path / "t")
    with MemWalWriter(uri, region=pinned) as writer, pytest.raises(BadInputError, match="route to other"):
        writer.put({"id": [mine[0], other], "name": ["b", "b"], "score": [1.0, 1.0]})
    assert tree_digest(tmp_path / "t") == before
    with MemWalWriter(uri, region=pinned) as writer:
        writer.put({"id": [mine[0]], "name": ["c"], "score": [2.0]})
    assert lsm_rows(uri)[mine[0]] == ("c", 2.0)
    assert lsm_rows(uri)[other] == ("a", 0.0)


VECTOR_DIM = 16
VECTOR_SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("v", pa.list_(pa.float32(), VECTOR_DIM)),
    ]
)


def vector_rows(keys: range) -> pa.Table:
    values = pa.array(np.random.default_rng(1).random(len(keys) * VECTOR_DIM, dtype=np.float32))
    vectors = pa.FixedSizeListArray.from_arrays(values, VECTOR_DIM)
    return pa.table({"id": pa.array(keys, pa.int64()), "v": vectors}, schema=VECTOR_SCHEMA)


def vector_table(path: Path) -> str:
    """One region over a base with an IVF_PQ index, which Lance maintains in memory while writing."""
    uri = str(path)
    dataset = lance.write_dataset(vector_rows(range(1000)), uri)
    dataset.create_index("v", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    return uri


def test_a_region_whose_index_reserve_needs_more_memory_falls_back_to_lances_limits(tmp_path: Path) -> None:
    """memwal's MemTable memory limits leave no room for a vector index's reserve at 1M-row MemTables;
    Lance refuses such a claim, and the writer claims again with Lance's own limits."""
    uri = vector_table(tmp_path / "t")
    with MemWalWriter(uri, max_memtable_rows=1_000_000) as writer:
        assert writer.put(vector_rows(range(5000, 5010))) == 10
    scanned = MemWalTable.open(uri).latest.to_table()  # the base is untouched; the put is in a generation
    assert scanned.num_rows == 1000
    (region,) = MemWalTable.open(uri).read_regions().values()
    assert region is not None and len(region.generations) == 1


ABANDON = """
import os, sys, lance, pyarrow as pa
from tests.integration.test_writer import vector_rows
writer = lance.dataset(sys.argv[1]).mem_wal_writer(sys.argv[2], max_memtable_rows=300)
writer.put(vector_rows(range(5000, 5200)))
os._exit(0)  # acknowledged, never closed: the rows are in the WAL only
"""


def test_a_wal_over_the_limits_on_a_vector_indexed_table_is_replayed(tmp_path: Path) -> None:
    """A WAL generation over the new writer's MemTable limits is replayed once with larger ones; on a
    table with a vector index the largest (10M rows) is refused by Lance, so smaller ones come first."""
    uri = vector_table(tmp_path / "t")
    region = str(uuid.uuid4())
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "LANCE_LOG": "error"}
    subprocess.run([sys.executable, "-c", ABANDON, uri, region], check=True, env=env, cwd=PROJECT_ROOT)
    with MemWalWriter(uri, region=region, max_memtable_rows=50) as writer:  # claims: replays the WAL
        writer.put(vector_rows(range(9000, 9001)))
    flushed = MemWalTable.open(uri).read_regions()[region]
    assert flushed is not None
    keys = set()
    for generation in flushed.generations:
        keys |= set(
            lance.dataset(f"{uri}/_mem_wal/{region}/{generation.path}")
            .to_table(columns=["id"])["id"]
            .to_pylist()
        )
    assert set(range(5000, 5200)) <= keys and 9000 in keys
