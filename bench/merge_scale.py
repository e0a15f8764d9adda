"""Benchmark: the merge commit as the base table grows (4M, 16M, 64M rows, a BTree on the key).

One batch: 3,000 upserts (half updates, half inserts), with 0 and with 200
deletes, committed from the same table version (restored between runs) by:
  (m) memwal: the form and index use `choose_commit` picks (printed with its reason)
  (s) the single form: upserts, the delete clause and the marker in one merge_insert
  (u) the upsert-only floor: the marked upsert with no delete clause and no index
Every result is checked (rows counted, deleted keys gone, upserted values
present). Aims: with deletes, (m) <= 2x (u) at 16M and 64M rows; (m) grows
less than 3x from 4M to 64M rows.

Usage: python bench/merge_scale.py [--bases 4000000,16000000,64000000] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from bench.merge_index import SCHEMA, build
from memwal_core.services.defaults import SINGLE
from memwal_core.services.merge.batch_merge import has_key_index
from memwal_core.services.merge.commit import CommitPlan, choose_commit, commit_batch

UPSERTS, DELETES = 3_000, 200


def batch(base_rows: int, deletes: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    keys = rng.choice(base_rows, UPSERTS // 2 + deletes, replace=False).astype(np.int64)
    upserts = np.concatenate([keys[deletes:], np.arange(base_rows, base_rows + UPSERTS - UPSERTS // 2)])
    return pa.table({"id": upserts, "n": upserts + 7}, schema=SCHEMA), pa.table({"id": keys[:deletes]})


def check(uri: str, base_rows: int, live: pa.Table, deleted: pa.Table, label: str) -> None:
    dataset = lance.dataset(uri)
    expected = base_rows + UPSERTS - UPSERTS // 2 - deleted.num_rows
    assert dataset.count_rows() == expected, f"{label}: {dataset.count_rows()} rows, expected {expected}"
    if deleted.num_rows:
        assert not dataset.count_rows(f"id IN ({', '.join(map(str, deleted.column('id').to_pylist()))})")
    sample = live.column("id").to_pylist()[:: max(1, UPSERTS // 50)]
    found = dataset.to_table(columns=["id", "n"], filter=f"id IN ({', '.join(map(str, sample))})").to_pylist()
    assert sorted((r["id"], r["n"]) for r in found) == sorted((k, k + 7) for k in sample), f"{label}: values"


def _commit(
    dataset: Any, *, targets: dict[str, int], live: pa.Table, keys: pa.Table, plan: CommitPlan
) -> None:
    commit_batch(dataset, ("id",), targets, live, keys, plan=plan)


def timed(uri: str, version: int, run: Callable[[Any], None], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        restored: Any = lance.dataset(uri, version=version)
        restored.restore()
        dataset = lance.dataset(uri)
        started = time.perf_counter()
        run(dataset)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default="4000000,16000000,64000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(5)
    memwal_seconds: dict[int, dict[int, float]] = {0: {}, DELETES: {}}
    print(
        f"{'base rows':>12} {'deletes':>7} {'(m) memwal':>11} {'(s) single':>11} {'(u) floor':>10} {'m/u':>5} {'s/u':>5}  memwal's choice"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for base_rows in (int(b) for b in args.bases.split(",")):
            uri = f"{tmp}/base-{base_rows}"
            build(uri, base_rows)
            version = lance.dataset(uri).version
            for deletes in (0, DELETES):
                live, deleted = batch(base_rows, deletes, rng)
                targets = {str(uuid.uuid4()): 1}
                chosen = choose_commit(
                    UPSERTS, deletes, base_rows, has_key_index(lance.dataset(uri), ("id",))
                )
                plans = {
                    "m": chosen,
                    "s": CommitPlan(SINGLE, False, False, "single"),
                    "u": CommitPlan(SINGLE, False, False, "floor"),
                }
                figures = {}
                for label, plan in plans.items():
                    keys = deleted if label != "u" else deleted.slice(0, 0)

                    run = partial(_commit, targets=targets, live=live, keys=keys, plan=plan)
                    figures[label] = timed(uri, version, run, args.repeats)
                    check(uri, base_rows, live, keys, label)
                memwal_seconds[deletes][base_rows] = figures["m"]
                print(
                    f"{base_rows:>12,} {deletes:>7} {figures['m']:>10.3f}s {figures['s']:>10.3f}s {figures['u']:>9.3f}s "
                    f"{figures['m'] / figures['u']:>5.2f} {figures['s'] / figures['u']:>5.2f}  {chosen.form}: {chosen.reason}",
                    flush=True,
                )
            shutil.rmtree(uri)
    for deletes, by_base in memwal_seconds.items():
        smallest, largest = min(by_base), max(by_base)
        print(
            f"(m) with {deletes} deletes grows {by_base[largest] / by_base[smallest]:.1f}x from "
            f"{smallest:,} to {largest:,} rows (aim < 3x)"
        )


if __name__ == "__main__":
    main()
