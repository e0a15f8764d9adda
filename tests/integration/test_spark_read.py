"""`spark.read.format("memwal")` returns the rows of Lance's own MemWAL-aware read (`LsmScanner`) and of a
plain model of every write, from a classic session and from pyspark's Connect server, on local disk and S3.

Tables are written by Lance's native MemWAL writer (the demo table, `ModelTable`) or memwal's
`MemWalWriter`: pending puts, updates and deletes in several regions, then partial merges. A read
planned before merges, GC and flushes commit returns the snapshot it planned.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql.types import LongType, StringType, StructField, StructType

from memwal_core import (
    GcPolicy,
    MemWalTable,
    MemWalWriter,
    gc,
    lsm_scanner,
    merge,
    plan_read,
    register_spark_source,
)
from memwal_core.demo import write_demo_table
from memwal_core.model.routing import region_spec_of
from memwal_core.services.spark_read.options import SourceOptions
from memwal_core.services.spark_read.plan import ReadSlice, SourcePlan, plan_source, slices
from memwal_core.services.spark_read.rows import read_slice
from memwal_core.services.spark_read.source import MemWalDataSource, MemWalReader
from memwal_core.services.status import status
from memwal_core.spark_session import connect_session, end_session
from tests.support.model import ModelTable
from tests.support.schema import key_field
from tests.support.secrets import SECRET as PASTED
from tests.support.secrets import shown
from tests.support.tables import lsm_rows_at

pytestmark = pytest.mark.spark

Key = tuple[Any, ...]
Rows = dict[Key, dict[str, Any]]


@pytest.fixture(scope="module")
def connect(connect_server: Any) -> Iterator[Any]:
    """One Spark Connect session on the shared server, with the source registered."""
    session = connect_session(connect_server.url)
    register_spark_source(session)
    yield session
    end_session(session)


@pytest.fixture(params=["classic", "connect"])
def session(request: pytest.FixtureRequest) -> Any:
    """The shared classic session or the Connect session, the source registered in it."""
    if request.param == "connect":
        return request.getfixturevalue("connect")
    spark = request.getfixturevalue("spark")
    register_spark_source(spark)
    return spark


def keyed(rows: list[dict[str, Any]], key: tuple[str, ...] = ("id",)) -> Rows:
    found = {tuple(r[k] for k in key): r for r in rows}
    assert len(found) == len(rows), "a key came back twice"
    return found


def spark_rows(
    session: Any,
    uri: str,
    storage_options: Mapping[str, str] | None = None,
    where: str | None = None,
    key: tuple[str, ...] = ("id",),
    **options: str,
) -> Rows:
    frame = session.read.format("memwal").options(**(storage_options or {}), **options).load(uri)
    if where is not None:
        frame = frame.where(where)
    return keyed(frame.toArrow().to_pylist(), key)


def lance_rows(table: MemWalTable, where: str | None = None, key: tuple[str, ...] = ("id",)) -> Rows:
    """Lance's own MemWAL-aware read of the table as it is now (memwal's plan: merged generations skipped)."""
    scanner = lsm_scanner(table, plan_read(table))
    if where is not None:
        scanner = scanner.filter(where)
    return keyed(scanner.to_table().to_pylist(), key)


def demo_model(model: Mapping[int, tuple[str, float]]) -> Rows:
    return {(k,): {"id": k, "name": name, "score": score} for k, (name, score) in model.items()}


def only(rows: Rows, keep: Callable[[int], bool]) -> Rows:
    return {k: v for k, v in rows.items() if keep(k[0])}


def test_the_source_equals_lance_and_the_model_at_every_merge_stage(
    session: Any, store_uri: tuple[str, dict[str, str]]
) -> None:
    root, options = store_uri
    uri = f"{root}/events"
    log = write_demo_table(uri, options, base_rows=300, regions=3, rounds=3, rows_per_generation=40)
    model = demo_model(log.model())
    deleted = sorted(set(log.base) - set(log.model()))
    updated = next(k for k in sorted(log.model()) if k in log.base and log.model()[k] != log.base[k])
    fresh = max(log.model())
    written = max(k for _kind, _region, keys, _values in log.ops for k in keys)
    picked = (deleted[0], updated, fresh, 7)
    lookups: dict[str, tuple[dict[str, str], Callable[[int], bool]]] = {
        f"id = {updated}": ({"keys": str(updated)}, lambda k: k == updated),
        f"id IN {picked}": ({"keys": ",".join(map(str, picked))}, lambda k: k in picked),
        "id BETWEEN 100 AND 199": ({"min_key": "100", "max_key": "199"}, lambda k: 100 <= k <= 199),
        f"id > {fresh}": ({"min_key": str(fresh + 1)}, lambda k: k > fresh),
    }
    with MemWalTable.open(uri, options) as table:
        stages = 0
        while True:
            assert status(table).pending_total > 0 or stages > 0
            assert spark_rows(session, uri, options) == lance_rows(table) == model
            if stages < 2:  # before any merge and after a partial one
                for where, (selection, keep) in lookups.items():
                    expected = only(model, keep)
                    assert spark_rows(session, uri, options, where) == lance_rows(table, where) == expected
                    assert spark_rows(session, uri, options, **selection) == expected, selection
                # Every generation's key range is read (on S3 too): above every key, nothing is left to read.
                beyond = reader_plan(uri, **options, min_key=str(written + 1))
                assert (beyond.regions, beyond.fragments) == ((), ())
            if status(table).pending_total == 0:
                break
            assert merge(table, max_generations=1).failures == []
            stages += 1
        assert stages >= 2


def test_base_only_and_an_older_base_version(session: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    log = write_demo_table(uri, base_rows=200, regions=2, rounds=2, rows_per_generation=30)
    with MemWalTable.open(uri) as table:
        before = table.dataset().version
        assert merge(table, max_generations=1).failures == []
        latest = table.dataset()
    base_now = keyed(latest.to_table().to_pylist())
    base_before = keyed(lance.dataset(uri, version=before).to_table().to_pylist())
    assert base_now != base_before, "the merge changed the base"
    assert spark_rows(session, uri, use_lsm="false") == base_now
    assert spark_rows(session, uri, use_lsm="false", version=str(before)) == base_before
    at_before = keyed(lsm_rows_at(uri, before, ["id", "name", "score"]))
    assert spark_rows(session, uri, version=str(before)) == at_before == demo_model(log.model())


VECTOR_SCHEMA = pa.schema(
    [
        key_field("tenant", pa.string()),
        key_field("id", pa.int64()),
        pa.field("vec", pa.list_(pa.float32(), 4)),
        pa.field("label", pa.string()),
    ]
)


def vector_row(tenant: str, i: int, label: str) -> dict[str, Any]:
    return {"tenant": tenant, "id": i, "vec": [float(i), 0.5, -1.0, float(len(label))], "label": label}


def test_a_vector_column_and_a_composite_key(session: Any, tmp_path: Path) -> None:
    key = ("tenant", "id")
    table = ModelTable(
        tmp_path / "vectors",
        VECTOR_SCHEMA,
        key,
        [vector_row(t, i, "base") for t in ("a", "b") for i in range(30)],
    )
    for tenant in ("a", "b"):
        table.write(
            None,
            [
                ("put", [vector_row(tenant, i, "updated") for i in range(0, 10)]),
                ("put", [vector_row(tenant, i, "new") for i in range(100, 104)]),
                ("delete", [{"tenant": tenant, "id": i} for i in range(20, 25)]),
            ],
            memtable_rows=8,
        )
    with MemWalTable.open(table.uri) as opened:
        assert len([r for r in plan_read(opened).regions if r.generations]) == 2
        expected = lance_rows(opened, key=key)
    assert expected == table.rows
    assert spark_rows(session, table.uri, key=key) == expected
    projected = spark_rows(session, table.uri, key=key, where="tenant = 'b'", columns="tenant,id,vec")
    assert projected == {
        k: {n: v[n] for n in ("tenant", "id", "vec")} for k, v in expected.items() if k[0] == "b"
    }
    schemed = session.read.format("memwal").schema("tenant STRING, id BIGINT, label STRING").load(table.uri)
    assert keyed(schemed.toArrow().to_pylist(), key) == {
        k: {n: v[n] for n in ("tenant", "id", "label")} for k, v in expected.items()
    }


def bucketed_table(uri: str, *, fragments: int, rows_per_fragment: int, buckets: int) -> None:
    """A base of `fragments` fragments of consecutive ids, MemWAL on with `buckets` regions by id, and
    pending generations: updates and deletes of base keys, and one generation of high keys only."""
    schema = pa.schema([key_field("id", pa.int64()), pa.field("name", pa.string())])
    ids = list(range(fragments * rows_per_fragment))
    base = pa.table({"id": ids, "name": [f"base-{i}" for i in ids]}, schema=schema)
    lance.write_dataset(base, uri, max_rows_per_file=rows_per_fragment).initialize_mem_wal(
        bucket_column="id", num_buckets=buckets
    )
    with MemWalWriter(uri) as writer:
        writer.put({"id": ids[::7], "name": [f"put-{i}" for i in ids[::7]]})
        writer.delete(ids[3::11])
        writer.flush()
        high = list(range(10_000, 10_040))
        writer.put({"id": high, "name": [f"high-{i}" for i in high]})


SCHEMA_ID_NAME = StructType([StructField("id", LongType(), False), StructField("name", StringType(), True)])


def source_reader(uri: str, **options: str) -> MemWalReader:
    """The reader of `options`, made as Spark makes it: the data source (as `load()` makes it), then its reader."""
    reader = MemWalDataSource({"path": uri, **options}).reader(SCHEMA_ID_NAME)
    assert isinstance(reader, MemWalReader)
    return reader


def reader_plan(uri: str, **options: str) -> SourcePlan:
    return source_reader(uri, **options).plan


def reader_slices(uri: str, **options: str) -> list[ReadSlice]:
    return [p.value for p in source_reader(uri, **options).partitions()]


def test_a_point_lookup_reads_one_region_and_only_the_fragment_its_key_is_in(
    session: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "bucketed")
    bucketed_table(uri, fragments=4, rows_per_fragment=100, buckets=4)
    with MemWalTable.open(uri) as table:
        regions = {r.region: r for r in plan_read(table).regions if r.generations}
        spec = region_spec_of(table.dataset())
        assert spec is not None and len(regions) == 4

        def region_of(key: int) -> str:
            codes, values = spec.route(pa.table({"id": pa.array([key], pa.int64())}))
            return next(r for r, read in regions.items() if read.field_values == values[codes[0]])

        full = reader_slices(uri)
        assert sorted(f for s in full for f in s.fragments) == [0, 1, 2, 3]
        assert sorted(r for s in full for r in s.regions) == sorted(regions)
        (point,) = reader_slices(uri, keys="250")
        assert point == ReadSlice((2,), (region_of(250),))
        several = reader_slices(uri, keys="5,350,10020")
        assert sorted(f for s in several for f in s.fragments) == [0, 3]
        assert sorted(r for s in several for r in s.regions) == sorted(
            {region_of(k) for k in (5, 350, 10_020)}
        )
        assert reader_slices(uri, keys="99999") == [], "a key in no region and no fragment reads nothing"

        # Below the high keys: fragment 0 only, and no region's generation of high keys only.
        below = reader_plan(uri, max_key="99")
        assert [f.fragment for f in below.fragments] == [0]
        everything = reader_plan(uri)
        skipped = {
            r.region: len(everything.region(r.region).generations) - len(r.generations) for r in below.regions
        }
        assert len(skipped) == 4 and all(n == 1 for n in skipped.values()), skipped
        assert reader_plan(uri, min_key="10000").fragments == ()

        selections = {
            "250": ("keys", "250", "id = 250"),
            "several": ("keys", "5,350,10020", "id IN (5, 350, 10020)"),
            "none": ("keys", "99999", "id = 99999"),
            "below": ("max_key", "99", "id <= 99"),
            "above": ("min_key", "10000", "id >= 10000"),
        }
        for option, value, where in selections.values():
            assert spark_rows(session, uri, **{option: value}) == lance_rows(table, where), where
        assert spark_rows(session, uri, min_key="100", max_key="199") == lance_rows(
            table, "id BETWEEN 100 AND 199"
        )
        assert spark_rows(session, uri) == lance_rows(table)


def test_a_dataframe_keeps_its_snapshot_and_no_query_narrows_the_next(session: Any, tmp_path: Path) -> None:
    """Spark keeps a Python source's plan on the DataFrame: a filtered query must not leave its rows to the next."""
    uri = str(tmp_path / "events")
    log = write_demo_table(uri, base_rows=200, regions=2, rounds=2, rows_per_generation=30)
    model = demo_model(log.model())
    frame = session.read.format("memwal").load(uri)
    assert keyed(frame.toArrow().to_pylist()) == model
    pushdown = "spark.sql.python.filterPushdown.enabled"
    before = session.conf.get(pushdown)
    try:
        for enabled in ("false", "true"):
            session.conf.set(pushdown, enabled)
            assert keyed(frame.where("id = 5").toArrow().to_pylist()) == only(model, lambda k: k == 5)
            assert keyed(frame.toArrow().to_pylist()) == model, (
                f"pushdown {enabled}: a filter narrowed the next query"
            )
            frame.createOrReplaceTempView("memwal_events")
            assert session.sql("SELECT count(*) FROM memwal_events WHERE id IN (5, 6)").first()[0] == 2
            assert session.sql("SELECT count(*) FROM memwal_events").first()[0] == len(model)
    finally:
        session.conf.set(pushdown, before)
    with MemWalWriter(uri) as writer:
        writer.put({"id": [5, 9_999_999], "name": ["later", "later"], "score": [1.0, 1.0]})
    assert keyed(frame.toArrow().to_pylist()) == model, "a DataFrame reads the snapshot its load() fixed"
    with MemWalTable.open(uri) as table:
        assert spark_rows(session, uri) == lance_rows(table) != model, "a new load() reads the new writes"


# Keys the writer rewrites in every flush, and DataFrames self-joined while it does.
REWRITTEN_KEYS = 600
SELF_JOINS = 8


def test_both_sides_of_a_self_join_read_one_snapshot_while_a_writer_flushes(
    session: Any, tmp_path: Path
) -> None:
    """Spark plans each side of a self-join on its own (the two sides even at once); both must read the
    snapshot the DataFrame fixed, while Lance's writer flushes new versions of every key."""
    uri = str(tmp_path / "events")
    write_demo_table(uri, base_rows=REWRITTEN_KEYS, regions=2, rounds=1, rows_per_generation=10)
    keys = list(range(REWRITTEN_KEYS))
    flushes: list[float] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def rewrite() -> None:
        try:
            with MemWalWriter(uri) as writer:
                while not stop.is_set():
                    name = f"flush-{len(flushes)}"
                    writer.put({"id": keys, "name": [name] * len(keys), "score": [0.0] * len(keys)})
                    writer.flush()
                    flushes.append(time.monotonic())
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    spark_rows(session, uri)  # warm: the first read starts the Python workers
    writer = threading.Thread(target=rewrite)
    writer.start()
    changed: list[int] = []
    overlapped = 0
    try:
        for _ in range(SELF_JOINS):
            started = time.monotonic()
            frame = session.read.format("memwal").load(uri)
            for _query in range(2):  # a new DataFrame's first query, then a later one
                pairs = frame.alias("a").join(frame.alias("b"), "id")
                changed.append(pairs.where("a.name != b.name").count())
            overlapped += any(started < f < time.monotonic() for f in flushes)
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    assert overlapped >= SELF_JOINS // 2, f"flushes committed during only {overlapped} of {SELF_JOINS} reads"
    assert changed == [0] * len(changed), "the two sides of a self-join read different snapshots"


# Nanoseconds since 1970: sub-microsecond digits, before 1970 by less than a microsecond, a null.
NANOS = [1_700_000_000_123_456_789, -1, -1_001, 1_999, None, 5_000]
NANOS_SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("at", pa.timestamp("ns")),
        pa.field("at_zoned", pa.timestamp("ns", tz="Europe/Paris")),
    ]
)


def nanos_row(key: int, nanos: int | None) -> dict[str, Any]:
    return {"id": key, "at": nanos, "at_zoned": nanos}


def as_spark(key: int, nanos: int | None) -> dict[str, Any]:
    """What Spark holds for `nanos`: the microsecond at or before it (without, and with, a time zone)."""
    if nanos is None:
        return {"id": key, "at": None, "at_zoned": None}
    naive = datetime(1970, 1, 1) + timedelta(microseconds=nanos // 1000)
    return {"id": key, "at": naive, "at_zoned": naive.replace(tzinfo=UTC)}


def test_nanosecond_timestamps_read_as_spark_microseconds_floored(session: Any, tmp_path: Path) -> None:
    """Spark holds microseconds: a nanosecond timestamp is floored to one, as PySpark's own Arrow conversion
    does, in the base and in pending generations, with and without a time zone."""
    base = {i: n for i, n in enumerate(NANOS)}
    table = ModelTable(tmp_path / "nanos", NANOS_SCHEMA, ["id"], [nanos_row(i, n) for i, n in base.items()])
    pending = {0: -999, 1: None, 100: 1_234_567_891, 101: -2_000_000_001}
    table.write(None, [("put", [nanos_row(i, n) for i, n in pending.items()])])
    assert session.read.format("memwal").load(table.uri).schema.simpleString() == (
        "struct<id:bigint,at:timestamp_ntz,at_zoned:timestamp>"
    )
    expected = {(i,): as_spark(i, n) for i, n in {**base, **pending}.items()}
    assert spark_rows(session, table.uri) == expected
    assert spark_rows(session, table.uri, use_lsm="false") == {(i,): as_spark(i, n) for i, n in base.items()}


def test_a_key_in_two_regions_is_refused(session: Any, tmp_path: Path) -> None:
    schema = pa.schema([key_field("id", pa.int64()), pa.field("v", pa.string())])
    table = ModelTable(tmp_path / "shared", schema, ["id"], [{"id": i, "v": "base"} for i in range(10)])
    for name in ("a", "b"):
        table.write(None, [("put", [{"id": 3, "v": name}, {"id": 100 + ord(name), "v": name}])])
    with pytest.raises(Exception) as refused:  # Spark wraps ours in its own
        spark_rows(session, table.uri)
    assert "all hold primary key 3 in pending generations" in str(refused.value)


def test_a_planned_read_returns_its_snapshot_after_merge_gc_and_flush_commit(tmp_path: Path) -> None:
    """The executors' code run after the plan was fixed: what committed since changes nothing read."""
    uri = str(tmp_path / "events")
    log = write_demo_table(uri, base_rows=300, regions=3, rounds=3, rows_per_generation=40)
    snapshot = demo_model(log.model())
    options = SourceOptions.parse({"path": uri})
    plan = plan_source(options).reading(["id", "name", "score"])
    output = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])

    with MemWalTable.open(uri) as table:
        assert merge(table).failures == [] and status(table).pending_total == 0
        gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0))
        planned = [
            Path(plan.generation_uri(r.region, path)) for r in plan.regions for _g, path in r.generations
        ]
        assert planned and all(d.is_dir() for d in planned), "GC keeps what the planned version still needs"
        with MemWalWriter(uri) as writer:  # a flush after the plan: not in it
            writer.put({"id": [0, 1_000_000_007], "name": ["changed", "added"], "score": [0.0, 0.0]})
            writer.delete([2])
        assert any(r.generations for r in plan_read(table).regions), "new generations pending"
        assert lance_rows(table) != snapshot

    rows = [
        row
        for part in slices(plan)
        for batch in read_slice(plan, part, options.storage, output)
        for row in batch.to_pylist()
    ]
    assert keyed(rows) == snapshot


def test_reads_during_concurrent_merges_and_gc_return_the_same_rows(session: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    log = write_demo_table(uri, base_rows=2000, regions=4, rounds=6, rows_per_generation=60)
    model = demo_model(log.model())
    commits: list[float] = []
    failures: list[BaseException] = []

    def churn() -> None:
        try:
            with MemWalTable.open(uri) as table:
                while status(table).pending_total:
                    assert merge(table, max_generations=1).failures == []
                    commits.append(time.monotonic())
                    gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0))
                    time.sleep(0.3)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    spark_rows(session, uri)  # warm: the first read starts the Python workers
    worker = threading.Thread(target=churn)
    worker.start()
    overlapped = reads = 0
    while worker.is_alive() or reads == 0:
        started = time.monotonic()
        assert spark_rows(session, uri) == model
        overlapped += any(started < c < time.monotonic() for c in commits)
        reads += 1
    worker.join()
    assert not failures, failures
    assert overlapped >= 1, f"no merge committed during any of {reads} reads"
    with MemWalTable.open(uri) as table:
        assert status(table).pending_total == 0
    assert spark_rows(session, uri) == model


def refusal(session: Any, uri: str, **options: str) -> str:
    """Spark's error for a DataFrame of `options`, raised when Spark makes its data source."""
    with pytest.raises(AnalysisException) as refused:
        frame = session.read.format("memwal").options(**options).load(uri)  # classic: made here
        frame.schema  # noqa: B018 (Spark Connect makes a DataFrame's data source when first asked about it)
    return str(refused.value)


def test_a_bad_option_is_refused_when_the_dataframe_is_made_in_one_line_naming_it(
    session: Any, tmp_path: Path
) -> None:
    """Spark shows a data source's error under the Python traceback that raised it: memwal's is one line
    naming the option and its value, under the one frame that raised it, before any query runs."""
    schema = pa.schema([key_field("name", pa.string()), pa.field("v", pa.int64())])
    names = ["sp", " sp", "a,b"]
    table = ModelTable(
        tmp_path / "names", schema, ["name"], [{"name": n, "v": i} for i, n in enumerate(names)]
    )
    no_version = f"memwal source option version='999': table {table.uri} has no version 999 (its latest is 2)"
    cases = {
        "memwal source option keys='[abc' is not a JSON array (Expecting value": {"keys": "[abc"},
        "memwal source option keys=' sp': text key ' sp' is empty or has spaces around it": {"keys": " sp"},
        "memwal source option keys='sp,': text key '' is empty": {"keys": "sp,"},
        no_version: {"version": "999"},
        "memwal source option columns='name,nope': table": {"columns": "name,nope"},
    }
    for message, options in cases.items():
        text = refusal(session, table.uri, **options)
        (line,) = [line for line in text.splitlines() if "memwal source option" in line]
        assert message in line, text
        assert text.count('File "') == 1, f"more than the frame that raised it:\n{text}"
    assert spark_rows(session, table.uri, key=("name",), keys='[" sp", "a,b"]') == {
        (n,): {"name": n, "v": names.index(n)} for n in (" sp", "a,b")
    }
    hide = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
    before = session.conf.get(hide)
    session.conf.set(hide, "true")
    try:  # Spark's own setting drops the traceback: the error is one line
        assert (
            refusal(session, table.uri, version="999")
            .splitlines()[0]
            .endswith(f"NotFoundError: {no_version}")
        )
    finally:
        session.conf.set(hide, before)


def test_bad_options_are_named_and_credentials_never_shown(
    session: Any, seaweed: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3://memwal-test/read-{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    secret = options["aws_secret_access_key"]
    write_demo_table(uri, options, base_rows=50, regions=2, rounds=1, rows_per_generation=10)
    cases = [
        ("unknown storage option ***", {"bogus": "1"}),
        ("has no column 'nope'", {"columns": "id,nope"}),
        ("has no version 999", {"version": "999"}),
        ("use_lsm=*** is not true or false", {"use_lsm": "maybe"}),
        ("rows_per_partition='0' is not a whole number", {"rows_per_partition": "0"}),
        ("keys: 'x' is not a value of key column id", {"keys": "1,x"}),
        # Issue 48: a credential given where another option's value belongs, or as a key.
        ("storage option timeout=*** is not a duration", {"timeout": PASTED}),
        ("version=*** is not a whole number", {"version": PASTED}),
        ("use_lsm=*** is not true or false", {"use_lsm": PASTED}),
        ("unknown storage option ***", {PASTED.lower(): "x"}),
        ("is not a valid checksum algorithm", {"aws_checksum_algorithm": PASTED}),
    ]
    for message, extra in cases:
        with pytest.raises(Exception) as refused:  # Spark wraps ours in its own
            spark_rows(session, uri, {**options, **extra})
        assert message in str(refused.value), str(refused.value)[:2000]
        assert secret not in str(refused.value) and not shown(str(refused.value)), str(refused.value)[:2000]
    frame = session.read.format("memwal").options(**options).load(uri).where("id < 10")
    frame.explain(True)
    with MemWalTable.open(uri, options) as table:
        assert frame.count() == len(lance_rows(table, "id < 10")) > 0
    assert secret not in capsys.readouterr().out
