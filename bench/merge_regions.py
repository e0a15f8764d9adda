"""Benchmark: a merge round over many regions, against one commit per region and one commit for all.

Cases (a 4M-row base with a BTree on the key; regions own disjoint keys):
  wide: 256 regions x 1 generation x 2,000 rows
  deep: 32 regions x 8 generations x 5,000 rows
  narrow: 64 regions x 1 generation x 2,000 rows (the round issue 35 measured on local disk)
Strategies, each from the same pre-merge table version (restored between runs),
each final table checked against a model of the writes:
  (a) memwal merge, local engine (plan + read + collapse + commit, all timed)
  (b) memwal merge, spark engine (session start and executor warm-up excluded)
  (p) the per-region floor: one marked merge_insert per region of rows collapsed in advance
  (f) the round floor: ONE marked merge_insert of every region's rows collapsed in advance
      (the single form, as issue-era merges committed; memwal may choose the faster two-step form)
  (c) with --cli: the `memwal` command, as an operator runs it: `memwal merge`'s wall minus
      `memwal status`'s on the same backlog (the round's own work, its start and its reads
      of the table subtracted), each a whole process
Prints medians and the ratios (a)/(f) (aim <= 1.5), (p)/(a) (aim >= 10 at 256
regions), (b)/(a) (aim <= 1.5) and (c)/(f) (aim <= 1.5).

Usage: python bench/merge_regions.py [--case wide|deep|narrow|both] [--repeats 3] [--floor-repeats 1]
       [--base-rows 4000000] [--skip-spark] [--cli] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LANCE_LOG", "error")

from bench.compiled import compile_checkout
from bench.merge import spark_engine
from memwal_core.model.evolution import TableFields
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import SINGLE
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.merge.collapse import collapse_tables, read_generation
from memwal_core.services.merge.commit import CommitPlan, commit_batch, commit_region
from memwal_core.services.merge.plan import plan_merge
from memwal_core.services.merge.service import merge
from tests.support.tables import restore_backlog

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("n", pa.int64()),
        pa.field("s", pa.string()),
    ]
)
CASES = {"wide": (256, 1, 2_000), "deep": (32, 8, 5_000), "narrow": (64, 1, 2_000)}
DELETE_SHARE = 20  # one key in 20 of each generation is a delete


class Model:
    """The expected table: the base (n = id * 1000) plus what the writes changed."""

    def __init__(self, base_rows: int) -> None:
        self.base_rows = base_rows
        self.changed: dict[int, int | None] = {}

    def check(self, uri: str, label: str) -> None:
        table = lance.dataset(uri).to_table(columns=["id", "n"])
        ids = table.column("id").to_numpy()
        values = table.column("n").to_numpy()
        changed_ids = np.fromiter(self.changed, np.int64, len(self.changed))
        untouched = ~np.isin(ids, changed_ids)
        assert (values[untouched] == ids[untouched] * 1000).all(), f"{label}: a base row changed"
        live = {k: v for k, v in self.changed.items() if v is not None}
        got = dict(zip(ids[~untouched].tolist(), values[~untouched].tolist(), strict=True))
        assert got == live, f"{label}: merged rows differ from the model"
        expected = self.base_rows - sum(1 for k in self.changed if k < self.base_rows) + len(live)
        assert len(ids) == expected, f"{label}: {len(ids)} rows, the model {expected}"


def build(uri: str, base_rows: int, regions: int, generations: int, per_generation: int) -> Model:
    """The base table with a BTree on the key, then every region's generations through Lance's writer."""
    rng = np.random.default_rng(7)
    ids = np.arange(base_rows, dtype=np.int64)
    base = pa.table({"id": ids, "n": ids * 1000, "s": pa.array(["b"] * base_rows)}, schema=SCHEMA)
    dataset = lance.write_dataset(base, uri, max_rows_per_file=1 << 22)
    dataset.create_scalar_index("id", "BTREE")
    dataset.initialize_mem_wal()
    model = Model(base_rows)
    deletes = per_generation // DELETE_SHARE
    for r in range(regions):
        owned = np.arange(r, base_rows, regions, dtype=np.int64)  # region r owns ids = r (mod regions)
        fresh = base_rows + r
        with lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=per_generation) as writer:
            for g in range(1, generations + 1):
                updates = rng.choice(owned, per_generation - deletes - per_generation // 5, replace=False)
                new = np.arange(fresh, fresh + regions * (per_generation // 5), regions, dtype=np.int64)
                fresh += regions * (per_generation // 5)
                put_ids = np.concatenate([updates, new])
                doomed = np.setdiff1d(rng.choice(owned, deletes * 2, replace=False), put_ids)[:deletes]
                values = put_ids * 1000 + g * 10 + 1
                writer.put(pa.table({"id": put_ids, "n": values, "s": ["u"] * len(put_ids)}, schema=SCHEMA))
                writer.delete(pa.table({"id": pa.array(doomed, pa.int64())}))
                model.changed.update(zip(put_ids.tolist(), values.tolist(), strict=True))
                model.changed.update(dict.fromkeys(doomed.tolist()))
    return model


def timed(uri: str, version: int, model: Model, label: str, run: Callable[[], None], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        restore_backlog(uri, version)
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
        model.check(uri, label)
    return statistics.median(seconds)


def command_seconds(*args: str) -> float:
    """Wall seconds of one `memwal` command, a process of its own."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args], cwd=ROOT, check=True, capture_output=True
    )
    return time.perf_counter() - started


def cli_work(uri: str, version: int, model: Model, repeats: int) -> tuple[float, float, float]:
    """Medians of `memwal merge`, `memwal status` and merge minus status, each pair on the same backlog."""
    merges, statuses, work = [], [], []
    for _ in range(repeats):
        restore_backlog(uri, version)
        statuses.append(command_seconds("status", uri))
        merges.append(command_seconds("merge", uri))
        work.append(merges[-1] - statuses[-1])
        model.check(uri, "c")
    return statistics.median(merges), statistics.median(statuses), statistics.median(work)


def collapsed_in_advance(uri: str) -> dict[str, tuple[int, pa.Table, pa.Table]]:
    """Every region's (target generation, live rows, deleted keys), collapsed before any timing."""
    with MemWalTable.open(uri) as table:
        plan = plan_merge(table)
        fields = TableFields.of(table.dataset())
    out = {}
    for region in plan.regions:
        tables = [read_generation(g, region.region, None, fields) for g in region.generations]
        live, deleted = collapse_tables(tables, ["id"], SCHEMA, what="bench")
        out[region.region] = (region.target_generation, live, pa.table({"id": deleted.column("id")}))
    return out


def run_case(name: str, args: argparse.Namespace, spark: Engine | None, workdir: Path) -> None:
    regions, generations, per_generation = CASES[name]
    uri = str(workdir / f"case-{name}")
    shutil.rmtree(uri, ignore_errors=True)
    started = time.perf_counter()
    model = build(uri, args.base_rows, regions, generations, per_generation)
    version = lance.dataset(uri).version
    print(
        f"case {name}: {args.base_rows:,} base rows (BTree on the key), {regions} regions x {generations} "
        f"generation(s) x {per_generation:,} rows; built in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    prepared = collapsed_in_advance(uri)

    def round_floor() -> None:
        lives = [live for _g, live, _d in prepared.values()]
        deleted = pa.concat_tables([d for _g, _l, d in prepared.values()])
        targets = {region: g for region, (g, _l, _d) in prepared.items()}
        floor = CommitPlan(SINGLE, False, False, "the round floor: one commit")
        commit_batch(lance.dataset(uri), ("id",), targets, pa.concat_tables(lives), deleted, plan=floor)

    def region_floor() -> None:
        for region, (g, live, deleted) in prepared.items():
            commit_region(lance.dataset(uri), ("id",), region, g, live, deleted, use_index=False)

    def memwal(engine: Engine) -> Callable[[], None]:
        def run() -> None:
            with MemWalTable.open(uri) as table:
                result = merge(table, engine=engine)
            assert not result.failures, result.failures
            assert len(result.regions) == regions

        return run

    results = {
        "f round floor": timed(uri, version, model, "f", round_floor, args.repeats),
        "a local": timed(uri, version, model, "a", memwal(LocalEngine()), args.repeats),
    }
    if spark is not None:
        results["b spark"] = timed(uri, version, model, "b", memwal(spark), args.repeats)
    if args.cli:
        merged, status, results["c merge-status"] = cli_work(uri, version, model, args.repeats)
        print(f"  memwal merge {merged:.2f} s, memwal status {status:.2f} s (medians, whole processes)")
    results["p region floor"] = timed(uri, version, model, "p", region_floor, args.floor_repeats)
    for label, seconds in results.items():
        print(f"  ({label:<14}) {seconds:8.2f} s")
    a, f, p = results["a local"], results["f round floor"], results["p region floor"]
    line = f"  ratios: (a)/(f) {a / f:.2f} (aim <= 1.5)   (p)/(a) {p / a:.1f} (aim >= 10 at 256 regions)"
    if "b spark" in results:
        line += f"   (b)/(a) {results['b spark'] / a:.2f} (aim <= 1.5)"
    if "c merge-status" in results:
        line += f"   (c)/(f) {results['c merge-status'] / f:.2f} (aim <= 1.5)"
    print(f"{line}   (load {os.getloadavg()[0]:.1f})", flush=True)
    shutil.rmtree(uri, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=[*CASES, "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--floor-repeats", type=int, default=1, help="repeats of (p), the slowest strategy")
    parser.add_argument("--base-rows", type=int, default=4_000_000)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--cli", action="store_true", help="also time the memwal command: merge minus status")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    if args.cli:
        compile_checkout(ROOT)
    spark = None if args.skip_spark else spark_engine()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in ("wide", "deep") if args.case == "both" else (args.case,):
            run_case(name, args, spark, Path(tmp))


if __name__ == "__main__":
    main()
