"""Benchmark: the ordered merge at scale S (1M base, 8 x 50k) and L (4M base, 32 x 200k).

Strategies, each from the same pre-merge table version (restored between runs),
each final table checked against a plain Python model of the writes:
  (a) memwal merge, local engine (plan + read + collapse + commit, all timed)
  (b) memwal merge, spark engine (session start reported separately)
  (c) the naive loop: per generation, in order, one marked merge_insert that
      upserts that generation's rows and deletes its tombstoned keys
  (d) the floor: one marked merge_insert of data collapsed in advance (collapse untimed)
Prints medians and the ratios (a)/(d), (b)/(a), (c)/(a).

Usage: python bench/merge.py [--scale S|L|both] [--repeats 3] [--skip-spark] [--skip-loop] [--dir DIR]
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

import lance
import numpy as np
import pyarrow as pa
from lance.mem_wal import CompactedSsTable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from memwal_core.model.evolution import TableFields
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import Engine, LocalEngine, SparkEngine
from memwal_core.services.merge.collapse import collapse_tables, read_generation
from memwal_core.services.merge.commit import commit_region, delete_predicate
from memwal_core.services.merge.plan import plan_merge
from memwal_core.services.merge.service import merge
from tests.support.tables import restore_backlog

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("n", pa.int64()),
    ]
)
SCALES = {"S": (1_000_000, 8, 50_000), "L": (4_000_000, 32, 200_000)}


def rows(ids: np.ndarray, generation: int, rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array(np.char.add(f"g{generation}-", ids.astype(str)).astype(object), pa.string()),
            "f": pa.array(rng.random(len(ids))),
            "n": pa.array(ids + generation),
        },
        schema=SCHEMA,
    )


def build(
    uri: str, base_rows: int, generations: int, per_generation: int, index: bool
) -> dict[int, tuple[str, int]]:
    """Base table plus pending generations written by Lance's writer; returns the model id -> (s, n)."""
    rng = np.random.default_rng(7)
    base = rows(np.arange(base_rows), 0, rng)
    dataset = lance.write_dataset(base, uri)
    if index:
        dataset.create_scalar_index("id", "BTREE")
    dataset.initialize_mem_wal()
    model = {i: (f"g0-{i}", i) for i in range(base_rows)}
    deletes = per_generation // 20
    puts = per_generation - deletes
    next_new = base_rows
    recent_new = np.empty(0, np.int64)
    with lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=per_generation) as writer:
        for g in range(1, generations + 1):
            updates = rng.choice(base_rows, puts // 2, replace=False)
            repeats = (
                rng.choice(recent_new, min(len(recent_new), puts // 10), replace=False)
                if len(recent_new)
                else recent_new
            )
            fresh = np.arange(next_new, next_new + puts - len(updates) - len(repeats))
            next_new += len(fresh)
            put_ids = np.concatenate([updates, repeats, fresh])
            doomed = np.setdiff1d(rng.choice(next_new, deletes * 2, replace=False), put_ids)[:deletes]
            writer.put(rows(put_ids, g, rng))
            writer.delete(pa.table({"id": pa.array(doomed, pa.int64())}))
            for i in put_ids.tolist():
                model[i] = (f"g{g}-{i}", i + g)
            for i in doomed.tolist():
                model.pop(i, None)
            recent_new = fresh
    return model


def check(uri: str, model: dict[int, tuple[str, int]], label: str) -> None:
    table = lance.dataset(uri).to_table(columns=["id", "s", "n"])
    ids = table.column("id").to_pylist()
    assert len(ids) == len(model), f"{label}: {len(ids)} rows, model {len(model)}"
    got = dict(
        zip(ids, zip(table.column("s").to_pylist(), table.column("n").to_pylist(), strict=True), strict=True)
    )
    assert got == model, f"{label}: table differs from the model"


def timed(
    uri: str,
    version: int,
    model: dict[int, tuple[str, int]],
    label: str,
    run: Callable[[], None],
    repeats: int,
) -> float:
    seconds = []
    for _ in range(repeats):
        restore_backlog(uri, version)
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
        check(uri, model, label)
    return statistics.median(seconds)


def naive_loop(uri: str) -> None:
    with MemWalTable.open(uri) as table:
        plan = plan_merge(table)
        fields = TableFields.of(table.dataset())
    for region in plan.regions:
        for source in region.generations:
            generation = read_generation(source, region.region, None, fields)
            live, deleted = collapse_tables([generation], ["id"], SCHEMA, what="bench")
            dataset = lance.dataset(uri)
            builder = dataset.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            if deleted.num_rows:
                builder = builder.when_not_matched_by_source_delete(delete_predicate(deleted, ["id"]))
            builder.mark_sstables_as_compacted([CompactedSsTable(region.region, source.generation)]).execute(
                live
            )


def scale(name: str, repeats: int, spark_engine: Engine | None, workdir: Path, loop: bool) -> None:
    for index in (False, True):
        run_case(name, index, repeats, spark_engine, workdir, loop)


def run_case(
    name: str, index: bool, repeats: int, spark_engine: Engine | None, workdir: Path, loop: bool
) -> None:
    """One scale, with or without a BTree index on the key: all strategies, then the ratios."""
    base_rows, generations, per_generation = SCALES[name]
    uri = str(workdir / f"scale-{name}-{'btree' if index else 'plain'}")
    shutil.rmtree(uri, ignore_errors=True)
    started = time.perf_counter()
    model = build(uri, base_rows, generations, per_generation, index)
    version = lance.dataset(uri).version
    print(
        f"scale {name} ({'BTree on key' if index else 'no index'}): built in {time.perf_counter() - started:.1f} s"
    )

    with MemWalTable.open(uri) as table:
        plan = plan_merge(table)
        region = plan.regions[0]
        fields = TableFields.of(table.dataset())
        tables = [read_generation(g, region.region, None, fields) for g in region.generations]
    live, deleted = collapse_tables(tables, ["id"], SCHEMA, what="bench")

    def floor() -> None:
        commit_region(
            lance.dataset(uri),
            ("id",),
            region.region,
            region.target_generation,
            live,
            deleted,
            use_index=False,
        )

    def local() -> None:
        with MemWalTable.open(uri) as table:
            assert not merge(table, engine=LocalEngine()).failures

    results = {
        "d floor": timed(uri, version, model, "floor", floor, repeats),
        "a local": timed(uri, version, model, "local", local, repeats),
    }
    if loop:
        results["c loop"] = timed(
            uri, version, model, "loop", lambda: naive_loop(uri), max(1, repeats if name == "S" else 1)
        )
    if spark_engine is not None:

        def spark() -> None:
            with MemWalTable.open(uri) as table:
                assert not merge(table, engine=spark_engine).failures

        results["b spark"] = timed(uri, version, model, "spark", spark, repeats)
    for label, seconds in results.items():
        print(f"  ({label:<8}) {seconds:7.2f} s")
    a, d = results["a local"], results["d floor"]
    line = f"  ratios: (a)/(d) {a / d:.2f} (aim <= 1.2)"
    if "c loop" in results:
        line += f"   (c)/(a) {results['c loop'] / a:.2f} (aim >= 3)"
    if "b spark" in results:
        line += f"   (b)/(a) {results['b spark'] / a:.2f} (aim at L <= 1.5)"
    print(line, flush=True)
    shutil.rmtree(uri, ignore_errors=True)


def spark_engine(master: str | None = None) -> SparkEngine:
    """A Spark engine whose session is started, and whose executors have imported what tasks import,
    outside the timings (as a running service has them); both times are printed."""
    from memwal_core.spark_session import spark_session

    def load(_slot: int) -> None:  # nested, so it ships by value: executors cannot import `bench`
        import lance  # noqa: F401

        import memwal_core.services.merge.collapse  # noqa: F401

    started = time.perf_counter()
    session = spark_session(master, {"spark.ui.enabled": "false"})
    session.range(1).count()
    print(
        f"spark session start ({session.sparkContext.master}): {time.perf_counter() - started:.1f} s (not included)"
    )
    engine = SparkEngine(session)
    started = time.perf_counter()
    engine.run(load, range(engine.parallelism()), what="executor warm-up")
    print(
        f"executor warm-up (python workers import lance): {time.perf_counter() - started:.1f} s (not included)"
    )
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=["S", "L", "both"], default="S")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--skip-loop", action="store_true", help="leave out (c), the slowest strategy")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    spark = None if args.skip_spark else spark_engine()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in ("S", "L") if args.scale == "both" else (args.scale,):
            scale(name, args.repeats, spark, Path(tmp), not args.skip_loop)


if __name__ == "__main__":
    main()
