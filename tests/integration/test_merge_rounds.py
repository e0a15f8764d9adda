"""Merge rounds: many regions in one commit, isolation of a bad region, races and crashes."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memwal_core.errors import BadInputError
from memwal_core.model.evolution import TableFields
from memwal_core.model.table import MemWalTable
from memwal_core.services.backlog import Watched, backlog_since
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.merge.batch import MergeBudget
from memwal_core.services.merge.plan import POLLED_CURRENT_SECONDS, MergePlan, plan_merge
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from tests.support.engines import merge_engine
from tests.support.model import ModelTable
from tests.support.paths import PROJECT_ROOT
from tests.support.peak_rss import command_peak_mib
from tests.support.schema import key_field
from tests.support.tables import assert_progress_never_decreases, lease_records, progress, progress_history

SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("v", pa.string()),
    ]
)


@pytest.fixture(params=["local", "spark"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    return merge_engine(request, monkeypatch, rows_per_task=8)


def regions_table(path: Path, regions: int, generations: int, rows: int = 6) -> tuple[ModelTable, list[str]]:
    """`regions` regions with disjoint keys (region r owns r*1000..), `generations` each, updates and deletes."""
    table = ModelTable(path, SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(0, 16_000, 500)])
    ids = [str(uuid.UUID(int=r + 1, version=4)) for r in range(regions)]
    for r, region in enumerate(ids):
        for g in range(generations):
            keys = range(r * 1000, r * 1000 + rows)
            table.write(
                region,
                [("put", [{"id": k, "v": f"r{r}g{g}"} for k in keys]), ("delete", [{"id": r * 1000 + g}])],
                memtable_rows=100,
            )
    return table, ids


def test_sixteen_regions_merge_in_one_commit(tmp_path: Path, engine: Engine) -> None:
    table, ids = regions_table(tmp_path / "t", regions=16, generations=2)
    before = table.dataset().version
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, engine=engine)
    assert not result.failures
    assert len(result.batches) == 1 and result.batches[0].regions == sorted(ids)
    # Deletes go first in a fenced commit of their own; ONE commit then carries every region's progress.
    assert result.batches[0].commit_form == "two-step"
    after = table.dataset().version
    assert after == before + 2
    assert {r.region: r.merged_generations for r in result.regions} == {r: [1, 2] for r in ids}
    assert all(r.table_version == after and r.batch == 1 for r in result.regions)
    with MemWalTable.open(table.uri) as opened:
        assert opened.index_details(after - 1).merged == {}, "the delete commit moves no progress"
    table.assert_merged()
    assert set(progress(table.uri).values()) == {2}


def test_missing_generation_in_a_batch_of_eight(tmp_path: Path, engine: Engine) -> None:
    table, ids = regions_table(tmp_path / "t", regions=8, generations=2)
    broken = ids[3]
    region_dir = Path(table.uri) / "_mem_wal" / broken
    generation_dir = next(region_dir.glob("*_gen_1"))
    moved = tmp_path / "away"
    shutil.move(generation_dir, moved)
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, engine=engine)
    assert [f.region for f in result.failures] == [broken]
    failure = result.failures[0]
    assert failure.exit_code == BadInputError.exit_code
    assert "generation 1" in failure.error and generation_dir.name in failure.error
    assert "\n" not in failure.error
    assert sorted(r.region for r in result.regions) == sorted(set(ids) - {broken})
    after = progress(table.uri)
    assert after[broken] == 0
    assert all(after[r] == 2 for r in ids if r != broken)
    # Put it back: the region merges, and the whole table equals the model.
    shutil.move(moved, generation_dir)
    with MemWalTable.open(table.uri) as opened:
        again = merge(opened, engine=engine)
    assert not again.failures and [r.region for r in again.regions] == [broken]
    table.assert_merged()


def test_two_regions_holding_one_key_are_refused(tmp_path: Path, engine: Engine) -> None:
    table = ModelTable(tmp_path / "t", SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(20)])
    a, b, clean = (str(uuid.UUID(int=n, version=4)) for n in (1, 2, 3))
    table.write(a, [("put", [{"id": 5, "v": "from a"}, {"id": 100, "v": "a"}])])
    table.write(b, [("put", [{"id": 200, "v": "b"}]), ("delete", [{"id": 5}])])
    version = table.dataset().version
    with MemWalTable.open(table.uri) as opened:
        refused = merge(opened, engine=engine, regions=[a, b])
    assert sorted(f.region for f in refused.failures) == [a, b]
    assert all("primary key 5" in f.error and f.exit_code == 2 for f in refused.failures)
    assert table.dataset().version == version, "nothing may be committed for a refused batch"
    assert not refused.regions and not refused.batches
    table.write(clean, [("put", [{"id": 300, "v": "c"}])])
    with MemWalTable.open(table.uri) as opened:
        mixed = merge(opened, engine=engine)
    assert sorted(f.region for f in mixed.failures) == [a, b]
    assert [r.region for r in mixed.regions] == [clean], "a clean region still merges"
    assert progress(table.uri) == {a: 0, b: 0, clean: 1}


def run_mergers(uri: str, commands: list[list[str]]) -> list[list[dict[str, Any]]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.merger_proc", uri, *command],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    rounds = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        rounds.append([json.loads(line) for line in out.splitlines()])
    return rounds


def test_batch_mergers_race_a_single_region_merger(tmp_path: Path) -> None:
    table, ids = regions_table(tmp_path / "t", regions=6, generations=6, rows=4)
    outputs = run_mergers(
        table.uri,
        [
            ["12", "1", "--max-batch-rows", "20", "--commit-form", "single"],
            ["12", "2", "--max-batch-rows", "9", "--commit-form", "two-step"],
            ["12", "3", "--region", ids[2]],
        ],
    )
    for rounds in outputs:
        for r in rounds:
            assert r["failures"] == [], r["failures"]
    merged_by = [
        sum(len(reg["merged_generations"]) for r in rounds for reg in r["regions"]) for rounds in outputs
    ]
    print(f"generations merged by each merger: {merged_by}")
    with MemWalTable.open(table.uri) as opened:
        merge(opened)
        assert status(opened).pending_total == 0
    assert_progress_never_decreases(progress_history(table.uri))
    table.assert_merged()


# The Spark merger starts its JVM after taking its first leases: its kills come later.
@pytest.mark.parametrize(
    ("engine_name", "runs", "delay"), [("local", 6, (0.0, 0.4)), ("spark", 3, (4.0, 12.0))]
)
def test_killed_batch_merger_converges_on_rerun(
    tmp_path: Path, engine_name: str, runs: int, delay: tuple[float, float]
) -> None:
    """kill -9 at random moments of a batched merge (collapsing, staging on Spark, committing, between batches)."""
    table, _ids = regions_table(tmp_path / "t", regions=6, generations=6, rows=200)
    rng = random.Random(5)
    kills = 0
    for _ in range(runs):
        before = table.dataset().version
        started_work = lease_records(table.uri)
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "memwal_core.cli.main", "merge", table.uri),
                *("--max-batch-rows", "250", "--engine", engine_name),
                # A Spark URL with the local engine is refused (it would be ignored).
                *(("--spark-master", "local[2,2]") if engine_name == "spark" else ()),
            ],
            cwd=PROJECT_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while (
            lease_records(table.uri) == started_work and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        time.sleep(rng.uniform(*delay))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        print(f"killed: {proc.returncode < 0}, versions committed: {table.dataset().version - before}")
        with MemWalTable.open(table.uri) as opened:
            status(opened)
        assert_progress_never_decreases(progress_history(table.uri))
    assert kills >= 1
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, budget=MergeBudget(250, 10**9))
        assert not result.failures
        assert status(opened).pending_total == 0
    table.assert_merged()


def peak_mib(tmp_path: Path, uri: str, *args: str) -> int:
    """Peak resident memory of a `memwal merge` process, as it measured itself."""
    return command_peak_mib(tmp_path, "merge", uri, *args)[0]


def test_memory_stays_within_the_budget(tmp_path: Path) -> None:
    """A one-region backlog 10x the byte budget: the merge's peak grows with the budget, not the backlog."""
    import lance

    budget_mib = 32
    table = ModelTable(tmp_path / "t", SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(1000)])
    region = str(uuid.uuid4())
    with lance.dataset(table.uri).mem_wal_writer(
        region, max_memtable_rows=8000, durable_write=False
    ) as writer:
        for g in range(40):  # 40 generations of 8,000 rows of ~1 KB: ~330 MB, 10x the budget
            ids = pa.array(range(g * 8000, (g + 1) * 8000), pa.int64())
            writer.put(pa.table({"id": ids, "v": ["x" * 1000] * 8000}, schema=SCHEMA))
    copies = {}
    for name in ("floor", "bounded", "unbounded"):
        copies[name] = str(tmp_path / name)
        shutil.copytree(table.uri, copies[name])
    # What a merge process holds whatever its backlog: the modules (Lance's included, which a merge's
    # dry run no longer loads) and the table. `catchup --dry-run` loads exactly that and merges nothing.
    floor = command_peak_mib(tmp_path, "catchup", copies["floor"], "--dry-run")[0]
    bounded = peak_mib(tmp_path, copies["bounded"], "--max-batch-bytes", str(budget_mib << 20))
    unbounded = peak_mib(tmp_path, copies["unbounded"], "--max-batch-bytes", str(1 << 40))
    print(f"peak MiB: floor {floor}, budget {budget_mib} MiB {bounded}, no budget {unbounded}")
    bound = floor + 10 * budget_mib
    assert bounded <= bound, f"peak {bounded} MiB over {bound} MiB with a {budget_mib} MiB budget"
    assert unbounded > bound, "the backlog is too small for this test to tell a budget from none"
    assert progress(copies["bounded"]) == {region: 40}


class OutOfBandMerger(LocalEngine):
    """The local engine, but right after the first collapse another merger commits `region` up to
    `generation` behind the batch's back (as a merger whose lease expired could)."""

    def __init__(self, uri: str, region: str, generation: int) -> None:
        super().__init__()
        self.uri, self.region, self.generation = uri, region, generation
        self.done = False

    def run(self, task: Any, items: Any, *, what: str, waiting: int | None = None) -> Any:
        import lance

        from memwal_core.services.merge.collapse import collapse_local
        from memwal_core.services.merge.commit import commit_region

        collapsed = super().run(task, items, what=what, waiting=waiting)
        if not self.done:
            self.done = True
            plan = next(unit.plan for unit in items if unit.plan.region == self.region)
            dataset = lance.dataset(self.uri)
            live, deleted = collapse_local(
                plan.generations[: self.generation], self.region, ("id",), TableFields.of(dataset), {}
            )
            commit_region(dataset, ("id",), self.region, self.generation, live, deleted, use_index=False)
        return collapsed


@pytest.mark.parametrize("overtaken_to", [1, 2])
def test_stale_region_in_a_batch_is_replanned_the_others_kept(tmp_path: Path, overtaken_to: int) -> None:
    table, ids = regions_table(tmp_path / "t", regions=3, generations=2)
    moved = ids[1]
    with MemWalTable.open(table.uri) as opened:
        result = merge(opened, engine=OutOfBandMerger(table.uri, moved, overtaken_to))
    assert not result.failures
    merged = {r.region: r for r in result.regions}
    assert set(merged) - {moved} == {ids[0], ids[2]}
    assert all(merged[r].merged_generations == [1, 2] for r in (ids[0], ids[2]))
    if overtaken_to == 1:
        assert merged[moved].merged_generations == [2], "re-planned from the progress recorded now"
        assert merged[moved].replans == 1
    else:
        assert moved not in merged, "the other merger merged everything: nothing left"
    assert len(result.batches) == 1
    assert_progress_never_decreases(progress_history(table.uri))
    assert set(progress(table.uri).values()) == {2}
    table.assert_merged()


def test_a_round_out_of_time_leaves_the_other_regions_for_the_next(tmp_path: Path) -> None:
    """`max_seconds`: the batch that outlasts it is the round's last; the regions not reached are deferred."""
    from tests.support.model import keyed_backlog_table

    table, _regions = keyed_backlog_table(tmp_path / "t", regions=3)
    one_region_a_batch = MergeBudget(max_rows=1, max_bytes=1 << 30)
    with MemWalTable.open(table.uri) as opened:
        regions = [r.region for r in status(opened).regions if r.pending_generations]
        assert len(regions) == 3
        first = merge(opened, budget=one_region_a_batch, max_seconds=0)
        assert len(first.batches) == 1 and not first.failures
        # A region whose later generations did not fit the batch is deferred too.
        assert {first.regions[0].region, *first.deferred_regions} == set(regions)
        assert len(first.deferred_regions) >= 2
        assert first.to_json()["deferred_regions"] == first.deferred_regions
        rest = merge(opened, budget=one_region_a_batch)
    assert not rest.deferred_regions and {r.region for r in rest.regions} == set(first.deferred_regions)
    table.assert_merged()


def test_a_round_asked_for_moments_ago_merges_what_its_poller_saw_and_the_next_the_rest(
    tmp_path: Path,
) -> None:
    """A round planned within POLLED_CURRENT_SECONDS of its poller's read takes each region at the
    manifest version the poller saw, with no HEAD of the next one: a flush since waits for the next
    round, which merges it. A version older than merge progress plans nothing; progress never goes
    back and every row lands once. A round that starts later (held in the run queue) reads the latest."""
    table, (flushed, quiet) = regions_table(tmp_path / "t", regions=2, generations=1)
    with MemWalTable.open(table.uri) as opened:
        seen = backlog_since(opened, Watched())
    versions = seen.manifest_versions
    polled_at = seen.backlog.read_at
    table.write(flushed, [("put", [{"id": 7, "v": "after the tick"}])])

    def planned(plan: MergePlan) -> dict[str, list[int]]:
        return {p.region: [g.generation for g in p.generations] for p in plan.regions}

    with MemWalTable.open(table.uri) as opened:
        late = plan_merge(
            opened, manifest_versions=versions, polled_at=polled_at - POLLED_CURRENT_SECONDS - 1
        )
        assert planned(late) == {flushed: [1, 2], quiet: [1]}, "a round held past the bound reads the latest"
        first = merge(opened, manifest_versions=versions, polled_at=polled_at)
    assert not first.failures and first.plan is not None
    assert planned(first.plan) == {flushed: [1], quiet: [1]}, "the flush after the tick waits"
    assert progress(table.uri) == {flushed: 1, quiet: 1}

    with MemWalTable.open(table.uri) as opened:
        again = backlog_since(opened, seen.watched)
        assert [r.pending for r in again.backlog.regions if r.pending] == [(2,)]
        second = merge(opened, manifest_versions=again.manifest_versions, polled_at=again.backlog.read_at)
        # The first tick's versions once more: older than merge progress now, so nothing to plan.
        stale = merge(opened, manifest_versions=versions, polled_at=time.time())
    assert [(r.region, r.merged_generations) for r in second.regions] == [(flushed, [2])]
    assert not stale.regions and not stale.failures
    assert_progress_never_decreases(progress_history(table.uri))
    assert progress(table.uri) == {flushed: 2, quiet: 1}
    table.assert_merged()
