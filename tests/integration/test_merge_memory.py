"""A merge round's peak memory is set by its batch budget, not by how many batches it commits."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from memwal_core.model.table import MemWalTable
from tests.support.peak_rss import command_peak_mib
from tests.support.schema import key_field

SCHEMA = pa.schema([key_field("id", pa.int64()), pa.field("n", pa.int64()), pa.field("s", pa.string())])
BASE_ROWS = 100_000
GENERATION_ROWS = 100_000
GENERATIONS = 24
BUDGET_ROWS = 2 * GENERATION_ROWS
# What a round may peak above its first batch: measured 19 MiB (150 before the fix).
SLACK_MIB = 50


def backlog_table(uri: str) -> str:
    """A base and one region's 24 generations of new keys (each ends with an update of a base key)."""
    ids = np.arange(BASE_ROWS, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "n": ids, "s": ["b"] * BASE_ROWS}, schema=SCHEMA), uri)
    lance.dataset(uri).initialize_mem_wal()
    region = str(uuid.uuid4())
    with lance.dataset(uri).mem_wal_writer(
        region, max_memtable_rows=GENERATION_ROWS, durable_write=False
    ) as writer:
        for g in range(GENERATIONS):
            keys = np.arange(BASE_ROWS + g * GENERATION_ROWS, BASE_ROWS + (g + 1) * GENERATION_ROWS)
            keys[-1] = g
            writer.put(pa.table({"id": keys, "n": keys + g, "s": [f"g{g}"] * len(keys)}, schema=SCHEMA))
    return region


def test_peak_does_not_grow_with_the_batches_a_round_commits(tmp_path: Path) -> None:
    """12 batches of 200k rows peak like the first batch alone, though the base grows 25-fold meanwhile.

    Before the fix each commit's join built its hash table on every key of the
    base, and freed memory piled up across batches: the round peaked 150 MiB
    above its first batch here.
    """
    uri = str(tmp_path / "t")
    region = backlog_table(uri)
    first = str(tmp_path / "first")
    shutil.copytree(uri, first)
    budget = ["--max-batch-rows", str(BUDGET_ROWS), "--max-batch-bytes", str(1 << 40)]
    one_batch, _ = command_peak_mib(tmp_path, "merge", first, *budget, "--max-generations", "2")
    round_peak, _ = command_peak_mib(tmp_path, "merge", uri, *budget)
    print(f"peak MiB: first batch alone {one_batch}, round of {GENERATIONS // 2} batches {round_peak}")
    with MemWalTable.open(uri) as table:
        assert table.index_details().merged_generation(region) == GENERATIONS
    merged = lance.dataset(uri)
    assert merged.count_rows() == BASE_ROWS + GENERATIONS * (GENERATION_ROWS - 1)
    assert merged.to_table(filter=f"id = {GENERATIONS - 1}").column("n").to_pylist() == [
        2 * (GENERATIONS - 1)
    ]
    assert round_peak <= one_batch + SLACK_MIB, (
        f"a round of {GENERATIONS // 2} batches peaked at {round_peak} MiB, its first batch alone at "
        f"{one_batch} MiB: memory grows with the batches committed"
    )
