"""Benchmark: compaction of a 4M-row base table after 32 merges, Spark vs local.

The base table and its 32 generations of 200k writes (updates, new keys,
deletes) come from `bench/merge.py`'s builder (Lance's own MemWAL writer);
memwal's merge service then merges one generation per commit, 32 commits, so
the base holds many fragments with deletion files. Every compaction runs on
a fresh copy of that table, so all start from the same files. Prints:
full-scan read time before and after (median of `--scans`), compaction
seconds per engine (median of `--repeats`; the phases of the last run),
fragments before and after, the cost per rewritten fragment, and the ratio
spark/local. The first compacted copy per engine is checked against the
model of the writes.

The Spark engine runs on a `local[2]` session whose start and executor
warm-up are reported separately, as a service would have them running.

Usage: python bench/compact.py [--rows 4000000] [--merges 32] [--target-rows 1048576] [--scans 3]
       [--repeats 3] [--index] [--skip-spark] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lance

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from bench.merge import build, check, spark_engine
from memwal_core.model.table import MemWalTable
from memwal_core.services.compact import CompactionResult, compact
from memwal_core.services.defaults import DEFAULT_TARGET_ROWS
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.merge.service import merge

Model = dict[int, tuple[str, int]]


def merged_table(uri: str, rows: int, merges: int, index: bool) -> Model:
    """`rows` base rows, then `merges` generations of rows/20 writes each, merged one per commit."""
    model = build(uri, rows, merges, max(1, rows // 20), index)
    with MemWalTable.open(uri) as table:
        for _ in range(merges):
            result = merge(table, max_generations=1, engine=LocalEngine())
            assert not result.failures, result.failures
    return model


def layout(uri: str) -> tuple[int, int]:
    """Fragments, and how many of them carry a deletion file."""
    fragments = lance.dataset(uri).get_fragments()
    return len(fragments), sum(1 for f in fragments if f.metadata.deletion_file is not None)


def scan_seconds(uri: str, repeats: int) -> float:
    """Median time of a full read of every column of the latest version."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        lance.dataset(uri).to_table()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def run_engine(
    source: str, uri: str, engine: Engine, target_rows: int, model: Model, repeats: int
) -> tuple[CompactionResult, list[float]]:
    """Compact fresh copies of `source` at `uri`; the wall seconds (all phases) of each run and the last result.

    The first compacted copy is checked against the model; the last one stays for the scan after.
    """
    seconds = []
    for attempt in range(repeats):
        shutil.rmtree(uri, ignore_errors=True)
        shutil.copytree(source, uri)
        started = time.perf_counter()
        with MemWalTable.open(uri) as table:
            result = compact(table, engine=engine, target_rows_per_fragment=target_rows)
        seconds.append(time.perf_counter() - started)
        assert not result.plan.tasks_left_out, "raise --max-tasks: the plan was cut"
        if attempt == 0:
            check(uri, model, result.engine)
    return result, seconds


def report(result: CompactionResult, runs: list[float]) -> float:
    """Print one engine's figures; returns the median seconds."""
    seconds = statistics.median(runs)
    per_fragment = seconds / max(1, result.fragments_removed)
    print(
        f"  {result.engine:<5} {seconds:7.2f} s median of {', '.join(f'{r:.2f}' for r in runs)}; last: (plan {result.seconds_plan:.2f}, execute "
        f"{result.seconds_execute:.2f}, commit {result.seconds_commit:.2f}); {len(result.plan.tasks)} task(s), "
        f"fragments {result.fragments_before} -> {result.fragments_after} "
        f"(removed {result.fragments_removed}, added {result.fragments_added}), "
        f"{result.rows_rewritten:,} rows rewritten; {per_fragment * 1000:.0f} ms per rewritten fragment",
        flush=True,
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000, help="base rows (400000 for a quick check)")
    parser.add_argument("--merges", type=int, default=32)
    parser.add_argument("--target-rows", type=int, default=DEFAULT_TARGET_ROWS)
    parser.add_argument("--scans", type=int, default=3, help="full scans per measurement (median)")
    parser.add_argument("--repeats", type=int, default=3, help="compactions per engine, each of a fresh copy")
    parser.add_argument("--index", action="store_true", help="a BTree on the key, remapped by compaction")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    engines: dict[str, Engine] = {"local": LocalEngine()}
    if not args.skip_spark:
        engines["spark"] = spark_engine("local[2]")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        source = str(Path(tmp) / "merged")
        started = time.perf_counter()
        model = merged_table(source, args.rows, args.merges, args.index)
        fragments, with_deletions = layout(source)
        print(
            f"{args.rows:,} base rows, {args.merges} merges{' (BTree on key)' if args.index else ''}: "
            f"built and merged in {time.perf_counter() - started:.1f} s; {len(model):,} rows, "
            f"{fragments} fragments ({with_deletions} with deletion files)"
        )
        before = scan_seconds(source, args.scans)
        print(f"full scan before compaction: {before:.3f} s", flush=True)
        seconds: dict[str, float] = {}
        after: dict[str, float] = {}
        for name, engine in engines.items():
            uri = str(Path(tmp) / name)
            result, runs = run_engine(source, uri, engine, args.target_rows, model, args.repeats)
            seconds[name] = report(result, runs)
            after[name] = scan_seconds(uri, args.scans)
            fragments_after, deletions_after = layout(uri)
            print(
                f"  full scan after ({name}): {after[name]:.3f} s "
                f"({fragments_after} fragments, {deletions_after} with deletion files)",
                flush=True,
            )
            shutil.rmtree(uri)
        line = f"ratios: scan before/after {before / after['local']:.2f}"
        if "spark" in seconds:
            line += f"   compaction spark/local {seconds['spark'] / seconds['local']:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
