"""Every public name of `memwal_core` answers a wrong argument with `BadInputError` naming it (issue 28, item 9).

The named cases are the ones a hostile caller tried (each raised AttributeError,
TypeError or ArrowInvalid from deep inside before); the property then throws
junk at every parameter of every public callable in `memwal_core.__all__`,
on a real table, and accepts only a result or one of memwal's own errors.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memwal_core
from memwal_core import BadInputError, MemwalError
from memwal_core.demo import write_demo_table
from memwal_core.storage.options import StorageOptions

REGION = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("api") / "table")
    write_demo_table(path, StorageOptions())
    yield path


@pytest.fixture(scope="module")
def table(table_path: str) -> Iterator[memwal_core.MemWalTable]:
    with memwal_core.MemWalTable.open(table_path) as opened:
        yield opened


NAMED: list[tuple[str, Callable[[memwal_core.MemWalTable, str], Any], str]] = [
    ("merge('path')", lambda t, p: memwal_core.merge(p), "merge() argument table"),  # type: ignore[arg-type]
    ("merge(engine='local')", lambda t, p: memwal_core.merge(t, engine="local"), "argument engine"),  # type: ignore[arg-type]
    ("gc(policy=5)", lambda t, p: memwal_core.gc(t, policy=5), "gc() argument policy"),  # type: ignore[arg-type]
    ("MemWalTable.open(123)", lambda t, p: memwal_core.MemWalTable.open(123), "argument uri"),  # type: ignore[arg-type]
    (
        "MemWalTable.open(P, 'x')",
        lambda t, p: memwal_core.MemWalTable.open(p, "x"),
        "argument storage_options",
    ),  # type: ignore[arg-type]
    (
        "merge(max_generations='3')",
        lambda t, p: memwal_core.merge(t, max_generations="3"),
        "argument max_generations",
    ),  # type: ignore[arg-type]
    (
        "merge(max_generations=0)",
        lambda t, p: memwal_core.merge(t, max_generations=0),
        "argument max_generations",
    ),
    ("GcPolicy(grace_seconds='10')", lambda t, p: memwal_core.GcPolicy(grace_seconds="10"), "grace_seconds"),  # type: ignore[arg-type]
    (
        "GcPolicy(grace_seconds=nan)",
        lambda t, p: memwal_core.GcPolicy(grace_seconds=math.nan),
        "grace_seconds",
    ),
    (
        "GcPolicy(fence_retention_seconds=nan)",
        lambda t, p: memwal_core.GcPolicy(fence_retention_seconds=math.nan),
        "fence_retention_seconds",
    ),
    ("MemWalWriter(P, bogus=1)", lambda t, p: memwal_core.MemWalWriter(p, bogus=1), "'bogus'"),
    (
        "merge(regions=uuid)",
        lambda t, p: memwal_core.merge(t, regions=REGION, dry_run=True),
        "argument regions",
    ),
    ("retain(older_than='7d')", lambda t, p: memwal_core.retain(t, older_than="7d"), "argument older_than"),  # type: ignore[arg-type]
    (
        "compact(deletion_threshold=2)",
        lambda t, p: memwal_core.compact(t, deletion_threshold=2.0),
        "deletion_threshold",
    ),
    ("LocalEngine(threads=0)", lambda t, p: memwal_core.LocalEngine(0), "argument threads"),
]


@pytest.mark.parametrize(("call", "named"), [(c, n) for _, c, n in NAMED], ids=[i for i, _, _ in NAMED])
def test_a_wrong_argument_is_bad_input_naming_it(
    table: memwal_core.MemWalTable, table_path: str, call: Callable[..., Any], named: str
) -> None:
    with pytest.raises(BadInputError) as refused:
        call(table, table_path)
    assert named in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_writer_refuses_a_ragged_put_and_a_claim_of_no_region(table_path: str) -> None:
    with memwal_core.MemWalWriter(table_path) as writer:
        with pytest.raises(BadInputError, match="expected length 2 but got length 1"):
            writer.put({"id": [1, 2], "name": ["a"], "score": [1.0, 2.0]})
        with pytest.raises(BadInputError, match="claim\\(\\) argument region 'nope' is not a region id"):
            writer.claim("nope")
        assert writer.stats() == {}, "nothing was claimed or written"


JUNK = st.sampled_from(
    [
        None,
        True,
        0,
        -1,
        2**64,
        1.5,
        math.nan,
        math.inf,
        "",
        "x",
        "3",
        b"x",
        [],
        ["x"],
        [1],
        {},
        {"a": 1},
        object(),
    ]
)


def _base_arguments(table: memwal_core.MemWalTable, path: str) -> dict[str, dict[str, Any]]:
    """Arguments each public callable accepts on the test table, without changing its data."""
    plan = memwal_core.plan_read(table)
    return {
        "MemWalTable": {"uri": path},
        "MemWalWriter": {"uri": path},
        "StorageOptions": {"values": {}},
        "GcPolicy": {},
        "MergeBudget": {"max_rows": 10, "max_bytes": 1000},
        "RegionSpecChoice": {},
        "WriterOptions": {},
        "LocalEngine": {"threads": 2},
        "SparkEngine": {},
        "build_snapshot": {"table": table},
        "catchup": {"table": table, "dry_run": True},
        "compact": {"table": table, "dry_run": True},
        "gc": {"table": table, "dry_run": True},
        "ingest": {"table": table, "paths": [f"{path}-no-such-source.csv"]},
        "initialize": {"table": table, "primary_key": ["id"], "spec": memwal_core.RegionSpecChoice()},
        "lsm_scanner": {"table": table, "plan": plan},
        "merge": {"table": table, "dry_run": True},
        "plan_read": {"table": table},
        "point_lookup": {"table": table, "plan": plan},
        "register_spark_source": {},
        "retain": {"table": table, "older_than": timedelta(days=3650)},
        "status": {"table": table},
    }


def _parameters(name: str) -> list[str]:
    value = getattr(memwal_core, name)
    target = value.__init__ if inspect.isclass(value) else value
    return [
        p.name
        for p in inspect.signature(target).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


CALLABLES = sorted(
    name
    for name in memwal_core.__all__
    if not name.endswith("Error") and callable(getattr(memwal_core, name))
)
PAIRS = [(name, parameter) for name in CALLABLES for parameter in _parameters(name)]


def test_the_property_covers_every_public_callable() -> None:
    assert {name for name, _ in PAIRS} == set(CALLABLES)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.sampled_from(PAIRS), junk=JUNK)
def test_junk_in_any_argument_is_a_result_or_a_memwal_error(
    table: memwal_core.MemWalTable, table_path: str, pair: tuple[str, str], junk: Any
) -> None:
    name, parameter = pair
    arguments = {**_base_arguments(table, table_path)[name], parameter: junk}
    if name == "SparkEngine" and parameter == "session" and junk is not None:
        return  # the session is the caller's own object, used only when a job runs
    try:
        made = getattr(memwal_core, name)(**arguments)
    except MemwalError as exc:
        assert "\n" not in str(exc)
        return
    if hasattr(made, "close") and name in ("MemWalTable", "MemWalWriter"):
        made.close()
