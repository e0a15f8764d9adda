"""Property: any stream of writes, merged in any chunking, region subsets and batch budgets by either engine, equals the model."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import AUTO, COMMIT_FORMS
from memwal_core.services.engine import Engine, LocalEngine, SparkEngine
from memwal_core.services.merge.batch import MergeBudget
from memwal_core.services.merge.service import merge
from memwal_core.services.merge.staged import ROWS_PER_TASK_ENV
from memwal_core.services.status import status
from tests.support.model import ModelTable
from tests.support.schema import key_field
from tests.support.tables import assert_progress_never_decreases, lsm_rows_at, progress_history

SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("v", pa.int64()),
    ]
)
KEYS = st.integers(min_value=0, max_value=40)
OP = st.one_of(
    st.tuples(st.just("put"), st.lists(KEYS, min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("delete"), st.lists(KEYS, min_size=1, max_size=3, unique=True)),
)
STREAM = st.lists(OP, min_size=1, max_size=25)
REGIONS = 4
# Each merge round: at most this many generations per region, a batch budget in rows, which regions,
# and how its batches commit.
ROUND = st.tuples(
    st.integers(1, 4),
    st.integers(1, 40),
    st.sets(st.integers(0, REGIONS - 1), min_size=1),
    st.sampled_from(COMMIT_FORMS),
)
ROUNDS = st.lists(ROUND, min_size=1, max_size=6)


Round = tuple[int, int, set[int], str]


def run_property(
    engine: Engine, stream: list[tuple[str, list[int]]], rounds: list[Round], memtable_rows: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table = ModelTable(Path(tmp) / "t", SCHEMA, ["id"], [{"id": i, "v": -i} for i in range(0, 40, 2)])
        regions = [str(uuid.UUID(int=i + 1, version=4)) for i in range(REGIONS)]
        for counter, (kind, keys) in enumerate(stream):
            # Like Lance's routing, a key always goes to the same region.
            for index, region in enumerate(regions):
                rows: list[dict[str, Any]] = [
                    {"id": k, "v": counter * 100 + k} for k in keys if k % REGIONS == index
                ]
                if rows:
                    table.write(region, [(kind, rows)], memtable_rows=memtable_rows)
        with MemWalTable.open(table.uri) as opened:
            for chunk, budget_rows, chosen, form in [*rounds, (10_000, 10_000, set(range(REGIONS)), AUTO)]:
                result = merge(
                    opened,
                    regions=[regions[i] for i in sorted(chosen) if regions[i] in opened.region_ids()],
                    max_generations=chunk,
                    engine=engine,
                    budget=MergeBudget(budget_rows, 10**9),
                    commit_form=form,
                )
                assert not result.failures, result.failures
                for batch in result.batches:
                    assert len(batch.regions) == len(set(batch.regions))
                    # Each region's share of the rows Lance deleted (counted from the engine's keys).
                    shares = [r for r in result.regions if r.batch == batch.batch]
                    assert sum(r.rows_deleted for r in shares) == batch.rows_deleted
                    assert all(r.rows_deleted <= r.tombstones for r in shares)
            final = status(opened)
        assert final.pending_total == 0
        for region in final.regions:
            assert region.merged_generation == (
                region.flushed_generations[-1] if region.flushed_generations else 0
            )
        assert_progress_never_decreases(progress_history(table.uri))
        table.assert_merged()
        # Every version a merge wrote (between a fenced delete and its upsert too) reads as the model.
        expected = sorted((r["id"], r["v"]) for r in table.rows.values())
        for version in range(2, table.dataset().version + 1):
            seen = sorted((r["id"], r["v"]) for r in lsm_rows_at(table.uri, version, ["id", "v"]))
            assert seen == expected, f"the MemWAL-aware read at version {version} differs from the model"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=STREAM, rounds=ROUNDS, memtable_rows=st.integers(2, 8))
def test_local_engine_matches_model(
    stream: list[tuple[str, list[int]]], rounds: list[Round], memtable_rows: int
) -> None:
    run_property(LocalEngine(), stream, rounds, memtable_rows)


def test_spark_engine_matches_model(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROWS_PER_TASK_ENV, "8")
    engine = SparkEngine(spark)

    @settings(
        max_examples=3,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(stream=STREAM, rounds=ROUNDS, memtable_rows=st.integers(2, 8))
    def check(stream: list[tuple[str, list[int]]], rounds: list[Round], memtable_rows: int) -> None:
        run_property(engine, stream, rounds, memtable_rows)

    check()
