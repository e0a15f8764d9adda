"""Benchmark: a merge's peak memory follows its batch budget, not the backlog.

One region with a backlog of 2M and of 10M rows (generations of 1M rows;
id, value and a short string), merged by `memwal merge` with a 1M-row budget,
and the 10M backlog once more with no budget (the baseline). Each merge runs
in its own process, which reports its own peak resident memory (VmHWM); the
floor is a `--dry-run` of the same table. Each merged table is checked
against the model (every key holds its last generation's value).

Usage: python bench/merge_memory.py [--backlogs 2000000,10000000] [--budget-rows 1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
        pa.field("s", pa.string()),
    ]
)
GENERATION_ROWS = 1_000_000
BASE_ROWS = 1_000_000


def build(uri: str, backlog: int) -> None:
    """A 1M-row base, then `backlog` rows in one region: every generation rewrites half the base's keys."""
    ids = np.arange(BASE_ROWS, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "n": ids, "s": ["b"] * BASE_ROWS}, schema=SCHEMA), uri)
    lance.dataset(uri).initialize_mem_wal()
    rng = np.random.default_rng(1)
    with lance.dataset(uri).mem_wal_writer(
        str(uuid.uuid4()), max_memtable_rows=GENERATION_ROWS, durable_write=False
    ) as writer:
        for g in range(backlog // GENERATION_ROWS):
            keys = rng.permutation(2 * BASE_ROWS)[:GENERATION_ROWS].astype(np.int64)
            writer.put(pa.table({"id": keys, "n": keys * 100 + g, "s": [f"g{g}"] * len(keys)}, schema=SCHEMA))


def check(uri: str) -> None:
    """Every key's value is from its newest write: n = id * 100 + generation, or the base's n = id."""
    table = lance.dataset(uri).to_table(columns=["id", "n", "s"])
    ids, values = table.column("id").to_numpy(), table.column("n").to_numpy()
    generation = np.array([int(s[1:]) if s != "b" else -1 for s in table.column("s").to_pylist()])
    expected = np.where(generation < 0, ids, ids * 100 + generation)
    assert (values == expected).all(), "a merged row does not match its generation"
    assert len(np.unique(ids)) == len(ids), "a key is in the table twice"


def peak_mib(workdir: Path, uri: str, *args: str) -> tuple[int, float]:
    out = workdir / f"peak-{uuid.uuid4().hex}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tests.support.peak_rss", str(out), "merge", uri, *args],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return int(out.read_text()) // 1024, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="2000000,10000000")
    parser.add_argument("--budget-rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    budget = ["--max-batch-rows", str(args.budget_rows), "--max-batch-bytes", str(1 << 40)]
    unbounded = ["--max-batch-rows", str(1 << 40), "--max-batch-bytes", str(1 << 40)]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        results = []
        for backlog in (int(b) for b in args.backlogs.split(",")):
            uri = str(work / f"backlog-{backlog}")
            build(uri, backlog)
            copy = f"{uri}-copy"
            shutil.copytree(uri, copy)
            floor, _ = peak_mib(work, uri, "--dry-run")
            bounded, seconds = peak_mib(work, uri, *budget)
            check(uri)
            results.append((backlog, f"budget {args.budget_rows:,} rows", floor, bounded, seconds))
            if backlog == max(int(b) for b in args.backlogs.split(",")):
                whole, seconds = peak_mib(work, copy, *unbounded)
                check(copy)
                results.append((backlog, "no budget (baseline)", floor, whole, seconds))
            shutil.rmtree(uri)
            shutil.rmtree(copy)
        print(
            f"{'backlog rows':>13}  {'merge':<24} {'floor MiB':>9} {'peak MiB':>9} {'over floor':>10} {'seconds':>8}"
        )
        for backlog, label, floor, peak, seconds in results:
            print(f"{backlog:>13,}  {label:<24} {floor:>9} {peak:>9} {peak - floor:>10} {seconds:>8.1f}")
        over = {(b, label): peak - floor for b, label, floor, peak, _ in results}
        small, large = sorted({b for b, *_ in results})[0], sorted({b for b, *_ in results})[-1]
        label = f"budget {args.budget_rows:,} rows"
        print(
            f"budgeted peak over floor, {large:,} / {small:,} backlog: {over[(large, label)] / over[(small, label)]:.2f} "
            f"(flat: ~1); baseline / budgeted at {large:,}: "
            f"{over[(large, 'no budget (baseline)')] / over[(large, label)]:.1f}"
        )


if __name__ == "__main__":
    main()
