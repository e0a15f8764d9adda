"""Benchmark: when does a merge commit gain from Lance's key index (`use_index(True)`)?

For bases of 1M, 4M and 16M rows (two columns, a BTree on the key) and
sources of 100 to 100,000 rows (a twentieth of them deletes, the rest
updates and inserts), times one marked merge commit with and without the
index, from the same table version (restored between runs), and prints the
ratio indexed/scan: where the crossover lies. The merge picks the index for an
upsert-only commit while source rows * INDEX_SOURCE_RATIO <= base rows
(memwal_core/services/merge/commit.py).

Then the two-step form's fenced delete-only commit alone, with and without the
index, for 100 to 30,000 deleted keys: the merge joins its deletes through the
index while deleted keys * INDEX_SOURCE_RATIO <= base rows too.

Usage: python bench/merge_index.py [--bases 1000000,4000000,16000000] [--sources 100,1000,10000,100000]
       [--deletes 100,1000,3000,10000,30000] [--repeats 3] [--dir DIR]
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
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from memwal_core.services.merge.commit import INDEX_SOURCE_RATIO, commit_region, delete_fenced

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
    ]
)


def build(uri: str, base_rows: int) -> None:
    ids = np.arange(base_rows, dtype=np.int64)
    dataset = lance.write_dataset(
        pa.table({"id": ids, "n": ids}, schema=SCHEMA), uri, max_rows_per_file=1 << 22
    )
    dataset.create_scalar_index("id", "BTREE")
    dataset.initialize_mem_wal()


def source(
    base_rows: int, rows: int, rng: np.random.Generator, with_deletes: bool
) -> tuple[pa.Table, pa.Table]:
    """`rows` source rows: a twentieth deletes of base keys (if any), the rest half updates, half inserts."""
    deletes = max(1, rows // 20) if with_deletes else 0
    keys = rng.choice(base_rows, deletes + (rows - deletes) // 2, replace=False).astype(np.int64)
    fresh = np.arange(base_rows, base_rows + rows - len(keys), dtype=np.int64)
    upserts = np.concatenate([keys[deletes:], fresh])
    return (
        pa.table({"id": upserts, "n": upserts + 1}, schema=SCHEMA),
        pa.table({"id": pa.array(keys[:deletes], pa.int64())}),
    )


def restored_seconds(uri: str, version: int, run: Callable[[Any], object], repeats: int) -> float:
    """Median seconds of `run(dataset)`, each on the table restored to `version`."""
    seconds = []
    for _ in range(repeats):
        restored: Any = lance.dataset(uri, version=version)
        restored.restore()
        dataset = lance.dataset(uri)
        started = time.perf_counter()
        run(dataset)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def commit_seconds(
    uri: str, version: int, live: pa.Table, deleted: pa.Table, use_index: bool, repeats: int
) -> float:
    region = str(uuid.uuid4())

    def run(dataset: Any) -> object:
        return commit_region(dataset, ("id",), region, 1, live, deleted, use_index=use_index)

    return restored_seconds(uri, version, run, repeats)


def delete_seconds(uri: str, version: int, deleted: pa.Table, use_index: bool, repeats: int) -> float:
    def run(dataset: Any) -> object:
        removed = delete_fenced(dataset, ("id",), deleted, use_index=use_index)
        assert removed == deleted.num_rows, (removed, deleted.num_rows)
        return removed

    return restored_seconds(uri, version, run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default="1000000,4000000,16000000")
    parser.add_argument("--sources", default="10,100,1000,10000,100000")
    parser.add_argument("--deletes", default="100,1000,3000,10000,30000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    sources = [int(s) for s in args.sources.split(",") if s]
    print(f"the merge uses the index while source rows * {INDEX_SOURCE_RATIO} <= base rows")
    print(
        f"a delete-only commit ('only' rows) uses it while deleted keys * {INDEX_SOURCE_RATIO} <= base rows"
    )
    print(
        f"{'base rows':>12} {'deletes':>8} {'source rows':>12} {'scan s':>8} {'index s':>8} {'index/scan':>10}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for base_rows in (int(b) for b in args.bases.split(",")):
            uri = f"{tmp}/base-{base_rows}"
            build(uri, base_rows)
            version = lance.dataset(uri).version
            for with_deletes in (False, True):
                for rows in sources:
                    live, deleted = source(base_rows, rows, rng, with_deletes)
                    scan = commit_seconds(uri, version, live, deleted, False, args.repeats)
                    indexed = commit_seconds(uri, version, live, deleted, True, args.repeats)
                    print(
                        f"{base_rows:>12,} {'yes' if with_deletes else 'no':>8} {rows:>12,} {scan:8.3f} "
                        f"{indexed:8.3f} {indexed / scan:10.2f}",
                        flush=True,
                    )
            for count in (int(d) for d in args.deletes.split(",")):
                deleted = pa.table({"id": rng.choice(base_rows, count, replace=False).astype(np.int64)})
                scan = delete_seconds(uri, version, deleted, False, args.repeats)
                indexed = delete_seconds(uri, version, deleted, True, args.repeats)
                print(
                    f"{base_rows:>12,} {'only':>8} {count:>12,} {scan:8.3f} {indexed:8.3f} {indexed / scan:10.2f}",
                    flush=True,
                )
            shutil.rmtree(uri, ignore_errors=True)


if __name__ == "__main__":
    main()
