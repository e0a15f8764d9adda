"""Benchmark: a merge's peak memory follows its batch budget, not the backlog.

One region over a 100,000-row base, with backlogs of 500k rows (5 generations
of 100k) and of 4M and 40M rows (generations of 200k). Each generation puts
new keys (three quarters of its rows) and updates base keys (a quarter), and
deletes 1% of the base keys it does not update, so every batch runs both
commit steps and the base grows with the backlog, as it does under a real
ingest. Every backlog is merged by `memwal merge --max-batch-rows 500000`, the
500k backlog also whole (no budget: the reference the aims compare with),
and the 4M backlog also with a 4M-row budget. Each merge runs in its own
process, which reports its own peak resident memory (VmHWM); the floor is
`memwal status` of the same table. Each merged table is checked against the
model: exactly the live keys, each with its last write.

Usage: python bench/merge_memory.py [--backlogs 500000,4000000,40000000] [--budget-rows 500000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.peak_rss import command_peak_mib

os.environ.setdefault("LANCE_LOG", "error")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
        pa.field("s", pa.string()),
    ]
)
BASE_ROWS = 100_000
GENERATION_ROWS = 200_000
SMALL_GENERATION_ROWS = 100_000  # the 500k backlog: 5 generations, as in the table
UPDATE_SHARE = 4  # a quarter of a generation's puts update base keys
DELETE_SHARE = 100  # and 1% of its rows delete base keys
BASE, DELETED = -1, -2  # a key's state in the model when no generation put it last


@dataclass
class Model:
    """Per key (ids 0..len-1): the generation that put it last, BASE or DELETED."""

    last: np.ndarray


def build(uri: str, backlog: int) -> Model:
    """The base, then `backlog` rows in one region; returns what the merged table must hold."""
    generation_rows = SMALL_GENERATION_ROWS if backlog < 1_000_000 else GENERATION_ROWS
    generations = backlog // generation_rows
    deletes = generation_rows // DELETE_SHARE
    updates = generation_rows // UPDATE_SHARE
    inserts = generation_rows - updates - deletes
    last = np.full(BASE_ROWS + generations * inserts, DELETED, dtype=np.int32)
    last[:BASE_ROWS] = BASE
    ids = np.arange(BASE_ROWS, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "n": ids, "s": ["b"] * BASE_ROWS}, schema=SCHEMA), uri)
    lance.dataset(uri).initialize_mem_wal()
    rng = np.random.default_rng(1)
    key_schema = pa.schema([SCHEMA.field("id")])
    with lance.dataset(uri).mem_wal_writer(
        str(uuid.uuid4()), max_memtable_rows=generation_rows, durable_write=False
    ) as writer:
        for g in range(generations):
            touched = rng.permutation(BASE_ROWS)[: updates + deletes].astype(np.int64)
            new = np.arange(BASE_ROWS + g * inserts, BASE_ROWS + (g + 1) * inserts, dtype=np.int64)
            keys = np.concatenate([touched[:updates], new])
            writer.put(
                pa.table({"id": keys, "n": keys * 1000 + g, "s": [f"g{g}"] * len(keys)}, schema=SCHEMA)
            )
            writer.delete(pa.table({"id": touched[updates:]}, schema=key_schema))
            last[keys] = g
            last[touched[updates:]] = DELETED
    return Model(last)


def check(uri: str, model: Model) -> None:
    """The merged table holds exactly the model's live keys, each with its last write."""
    table = lance.dataset(uri).to_table(columns=["id", "n"])
    order = np.argsort(table.column("id").to_numpy())
    ids, values = table.column("id").to_numpy()[order], table.column("n").to_numpy()[order]
    live = np.flatnonzero(model.last != DELETED)
    assert np.array_equal(ids, live), f"{uri}: {len(ids)} keys merged, the model has {len(live)}"
    last = model.last[live]
    expected = np.where(last == BASE, live, live * 1000 + last)
    assert np.array_equal(values, expected), f"{uri}: a merged row does not hold its last write"


def peak_mib(workdir: Path, *args: str) -> tuple[int, float, dict[str, Any]]:
    """Peak resident memory (MiB) of one `memwal --json` command in its own process, its seconds and output."""
    started = time.perf_counter()
    peak, stdout = command_peak_mib(workdir, "--json", *args)
    return peak, time.perf_counter() - started, json.loads(stdout)


def merge_peak(work: Path, uri: str, model: Model, budget_rows: int) -> tuple[int, float, int]:
    """Merge a copy of `uri` under a row budget, check it, and return (peak MiB, seconds, commits)."""
    copy = f"{uri}-{budget_rows}"
    shutil.copytree(uri, copy)
    try:
        peak, seconds, result = peak_mib(
            work, "merge", copy, "--max-batch-rows", str(budget_rows), "--max-batch-bytes", str(1 << 40)
        )
        check(copy, model)
    finally:
        shutil.rmtree(copy)
    return peak, seconds, int(result["commits"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="500000,4000000,40000000")
    parser.add_argument("--budget-rows", type=int, default=500_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    backlogs = sorted(int(b) for b in args.backlogs.split(","))
    rows: list[tuple[int, str, int, int, int, float]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        for backlog in backlogs:
            uri = str(work / f"backlog-{backlog}")
            model = build(uri, backlog)
            floor, _, _ = peak_mib(work, "status", uri)
            budgets = [args.budget_rows]
            if backlog == backlogs[0]:
                budgets.append(1 << 40)  # merged whole: the reference
            if backlog == 4_000_000:
                budgets.append(4_000_000)
            for budget in budgets:
                peak, seconds, commits = merge_peak(work, uri, model, budget)
                label = "none" if budget == 1 << 40 else f"{budget:,}"
                rows.append((backlog, label, commits, floor, peak, seconds))
                print(
                    f"{backlog:,} rows, budget {label}: peak {peak} MiB, {commits} commit(s)", file=sys.stderr
                )
            shutil.rmtree(uri)
    print("| backlog | `--max-batch-rows` | commits | floor MiB | peak MiB | peak / floor | seconds |")
    print("|---|---|---|---|---|---|---|")
    for backlog, label, commits, floor, peak, seconds in rows:
        print(
            f"| {backlog:,} | {label} | {commits} | {floor} | {peak} | {peak / floor:.2f} | {seconds:.1f} |"
        )
    peaks = {(b, label): peak for b, label, _c, _f, peak, _s in rows}
    budget = f"{args.budget_rows:,}"
    whole = peaks.get((backlogs[0], "none"))
    if whole is not None:
        for backlog in backlogs:
            print(
                f"{backlog:,} rows at a {budget}-row budget / {backlogs[0]:,} merged whole: "
                f"{peaks[(backlog, budget)] / whole:.2f} (aim at 40M: <= 1.2)"
            )
    if (4_000_000, "4,000,000") in peaks:
        print(
            f"4,000,000 rows, budget {budget} / budget 4,000,000: "
            f"{peaks[(4_000_000, budget)] / peaks[(4_000_000, '4,000,000')]:.2f} (aim: <= 0.6)"
        )


if __name__ == "__main__":
    main()
