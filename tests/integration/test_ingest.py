"""Ingestion: files into regions through MemWalWriter, locally and on Spark, and its refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from memwal_core.errors import BadInputError
from memwal_core.format.naming import STAGING_DIR
from memwal_core.model.table import MemWalTable
from memwal_core.services.engine import SparkEngine
from memwal_core.services.ingest.service import ingest
from memwal_core.services.ingest.sources import resolve_sources
from memwal_core.services.writer import MemWalWriter, WriterOptions
from memwal_core.spark_session import DAEMON_MODULE
from tests.support.cli import run_cli
from tests.support.engines import engine_called
from tests.support.paths import PROJECT_ROOT
from tests.support.schema import lsm_rows, make_table, model_of, source_rows
from tests.support.tables import tree_digest


def test_local_ingest_of_parquet_csv_and_json(tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t")
    first, second = source_rows(3000), source_rows(2000, offset=2500, tag="u")  # 500 keys updated
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(first.slice(0, 1500), src / "a.parquet")
    pq.write_table(first.slice(1500), src / "b.parquet")
    pcsv.write_csv(second.slice(0, 1000), src / "c.csv")
    with open(src / "d.json", "w") as handle:
        for row in second.slice(1000).to_pylist():
            handle.write(json.dumps(row) + "\n")
    table = MemWalTable.open(uri)
    for pattern, fmt in (
        (str(src / "*.parquet"), None),
        (str(src / "c.csv"), "csv"),
        (str(src / "d.json"), None),
    ):
        result = ingest(table, [pattern], fmt=fmt, writer_options=WriterOptions(max_memtable_rows=800))
        assert result.rows_written == result.rows_read > 0
    assert lsm_rows(uri) == model_of(first, second)


def test_s3_sources_by_folder_glob_and_name(tmp_path: Path, seaweed: Any) -> None:
    """S3 sources are listed by s3fs and read by Arrow's own S3 client, both with the source options."""
    options = seaweed.storage_options()
    uri = make_table(tmp_path / "t")
    first, second = source_rows(3000), source_rows(2000, offset=2500, tag="u")
    prefix = f"ingest-sources-{uuid.uuid4().hex}"
    pq.write_table(first.slice(0, 1500), tmp_path / "a.parquet")
    pq.write_table(first.slice(1500), tmp_path / "b.parquet")
    pcsv.write_csv(second.slice(0, 1000), tmp_path / "c.csv")
    (tmp_path / "d.json").write_text("".join(json.dumps(r) + "\n" for r in second.slice(1000).to_pylist()))
    for name, key in (("a.parquet", "parts/a.parquet"), ("b.parquet", "parts/b.parquet"), ("c.csv", "c.csv")):
        seaweed.client().upload_file(str(tmp_path / name), "memwal-test", f"{prefix}/{key}")
    seaweed.client().upload_file(str(tmp_path / "d.json"), "memwal-test", f"{prefix}/d.json")
    table = MemWalTable.open(uri)
    for source in ("parts", "*.csv", "d.json"):
        result = ingest(table, [f"s3://memwal-test/{prefix}/{source}"], source_options=options)
        assert result.rows_written == result.rows_read > 0, source
    assert lsm_rows(uri) == model_of(first, second)


def test_refused_source_exits_cleanly_while_arrow_reads_ahead(tmp_path: Path) -> None:
    """The first block of a large CSV is refused while Arrow's threads have read the next ones.

    Arrow used to read through a Python file object, so the blocks it had read
    ahead were Python bytes. The thread that dropped them took the GIL; if the
    interpreter was exiting by then, Python ended that thread inside Arrow's C++
    code and the process aborted after its error line (SIGABRT, in about one run
    in four of this command before the fix; the CI saw it once on a 23-byte file).
    """
    good = "".join(f"{k},name-{k},{k}.5\n" for k in range(2, 4_000_002))
    source = tmp_path / "rows.csv"
    source.write_text("id,name,score\n1,a,not-a-number\n" + good)  # ~120 MB: Arrow reads 1 MiB blocks
    uri = make_table(tmp_path / "t")
    for attempt in range(8):
        proc = run_cli("ingest", uri, str(source))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (attempt, proc.returncode, proc.stderr)
        assert "not-a-number" in proc.stderr


def test_sources_reach_arrow_as_its_own_files(tmp_path: Path, seaweed: Any) -> None:
    """The rule behind the test above: Arrow is handed its own file objects, never a Python one."""
    (tmp_path / "a.csv").write_text("id,name,score\n1,a,1.5\n")
    seaweed.client().upload_file(str(tmp_path / "a.csv"), "memwal-test", "native-files/a.csv")
    sources = resolve_sources(
        [str(tmp_path / "a.csv"), "s3://memwal-test/native-files/a.csv"], None, seaweed.storage_options()
    )
    for path in sources.files:
        with sources.open(path) as handle:
            assert isinstance(handle, pa.NativeFile) and not isinstance(handle, pa.PythonFile), path


@pytest.mark.parametrize(("engine", "buckets"), [("spark", 4), ("spark", 16), ("connect", 4)])
def test_spark_ingest_equals_the_source_deduplicated(
    tmp_path: Path, engine: str, buckets: int, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = make_table(tmp_path / "t", bucket_column="id", num_buckets=buckets)
    src = tmp_path / "src"
    src.mkdir()
    parts = [source_rows(50_000, offset=i * 40_000, tag=f"p{i}-") for i in range(6)]  # overlaps: duplicates
    for i, part in enumerate(parts):
        pq.write_table(part, src / f"part-{i}.parquet")
    result = ingest(MemWalTable.open(uri), [str(src)], engine=engine_called(engine, request, monkeypatch, 1))
    assert result.rows_read == 300_000 and len(result.regions) == buckets and result.engine == "spark"
    assert lsm_rows(uri) == model_of(*parts)  # duplicated keys: the later file's row wins
    assert not MemWalTable.open(uri).store.list_files(STAGING_DIR, recursive=True), "staged parts left behind"


def _python_workers_of(pid: int) -> list[int]:
    """PySpark Python workers forked under this process (the daemon's children, not the daemon)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                    commands[int(entry)] = cmd.read().decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue

    def descends(p: int) -> bool:
        while p > 1:
            if p == pid:
                return True
            p = parents.get(p, 0)
        return False

    # Spark's daemon, or memwal's (which imports the task modules, then runs Spark's).
    daemons = {
        p for p, c in commands.items() if ("pyspark.daemon" in c or DAEMON_MODULE in c) and descends(p)
    }
    return [p for p in daemons if parents.get(p) in daemons]


def test_spark_task_killed_mid_way_is_retried_and_fences_its_first_attempt(
    spark: Any, tmp_path: Path
) -> None:
    uri = make_table(tmp_path / "t", bucket_column="id", num_buckets=2)
    src = tmp_path / "src.parquet"
    rows = source_rows(80_000)
    pq.write_table(rows, src)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = ingest(
                MemWalTable.open(uri),
                [str(src)],
                engine=SparkEngine(spark),
                writer_options=WriterOptions(max_memtable_rows=2_000, max_wal_flush_interval_ms=50),
            )
        except BaseException as exc:  # reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed: list[int] = []
    deadline = time.monotonic() + 300
    while thread.is_alive() and not killed and time.monotonic() < deadline:
        wal_entries = list((tmp_path / "t" / "_mem_wal").glob("*/wal/*"))
        if len(wal_entries) >= 6:  # writing has begun: some puts acknowledged, more to come
            for worker in _python_workers_of(os.getpid()):
                os.kill(worker, signal.SIGKILL)
                killed.append(worker)
        time.sleep(0.05)
    thread.join(timeout=600)
    assert killed, "no Python worker was caught mid-write"
    assert "error" not in outcome, outcome.get("error")
    assert lsm_rows(uri) == model_of(rows)
    epochs = [m.writer_epoch for m in MemWalTable.open(uri).read_regions().values() if m is not None]
    assert max(epochs) >= 2, f"no region was re-claimed by a retried task (epochs {epochs})"


def test_spark_ingest_on_a_standalone_cluster(standalone_spark: Any, tmp_path: Path) -> None:
    uri = make_table(tmp_path / "t", bucket_column="id", num_buckets=4)
    rows = source_rows(40_000)
    pq.write_table(rows, tmp_path / "src.parquet")
    proc = run_cli(
        "ingest",
        "t",
        "src.parquet",
        "--engine",
        "spark",
        "--spark-master",
        standalone_spark.master_url,
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Quiet: no log4j banner, JVM notice, lance fork warning or Py4J goodbye (they go to Spark's log).
    assert proc.stderr == "", proc.stderr[-2000:]
    payload = json.loads(proc.stdout)
    assert payload["rows_written"] == 40_000 and len(payload["regions"]) == 4
    assert lsm_rows(uri) == model_of(rows)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (
            lambda d: pq.write_table(
                pa.table({"id": [1, None], "name": ["a", "b"], "score": [1.0, 2.0]}), d / "s.parquet"
            ),
            "column id has 1 null",
        ),
        (
            lambda d: pq.write_table(pa.table({"name": ["a"], "score": [1.0]}), d / "s.parquet"),
            "column id is missing",
        ),
        (lambda d: (d / "s.csv").write_text("id,name,score\n1,a,1.0\nx,b,2.0\n"), "s.csv"),
        (
            lambda d: (d / "s.csv").write_text(f"id,name,score\n1,a,1.0\n2,{'n' * (3 << 20)},2.0\n"),
            "a row is longer than 1 MiB",
        ),
        (
            lambda d: pq.write_table(
                pa.table({"id": [1], "name": ["a"], "score": ["high"]}), d / "s.parquet"
            ),
            "column score: cannot cast",
        ),
        (lambda d: pq.write_table(source_rows(0), d / "s.parquet"), "the sources hold no rows"),
        (lambda d: None, "does not exist"),
    ],
    ids=[
        "null-key",
        "missing-key",
        "bad-csv-value",
        "csv-row-too-long",
        "wrong-type",
        "empty",
        "missing-source",
    ],
)
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_bad_input_exits_2_and_writes_nothing(
    spark: Any, tmp_path: Path, engine: str, write: Any, message: str
) -> None:
    uri = make_table(tmp_path / "t")
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(source_rows(100, offset=1000), src / "good.parquet")  # read first: still nothing written
    write(src)
    before = tree_digest(tmp_path / "t")
    pattern = str(src / "s.*") if any(src.glob("s.*")) else str(src / "nothing-*.parquet")
    # A good file goes first (checked, never written), except where the point is that all are empty.
    paths = [pattern] if "no rows" in message else [str(src / "good.parquet"), pattern]
    if engine == "local":
        proc = run_cli("ingest", uri, *paths)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    else:
        with pytest.raises(BadInputError, match=message):
            ingest(MemWalTable.open(uri), paths, engine=SparkEngine(spark))
    assert tree_digest(tmp_path / "t") == before


REFUSED_SOURCES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "bad-file": (lambda d: [_write(d / "s.parquet", b"PAR1 not a parquet file")], "s.parquet"),
    "bad-schema": (
        lambda d: [_parquet(d / "s.parquet", pa.table({"idx": [1], "name": ["a"], "score": [1.0]}))],
        "column idx is not in the table schema",
    ),
    "null-key": (
        lambda d: [
            _parquet(d / "s.parquet", pa.table({"id": [5, None], "name": ["a", "b"], "score": [1.0, 2.0]}))
        ],
        "column id has 1 null",
    ),
    "missing-file": (lambda d: [str(d / "nothing.parquet")], "does not exist"),
    "unknown-format": (lambda d: [_write(d / "s.xyz", b"1,a,1.0\n")], "cannot tell the format"),
    "fifo": (lambda d: [_fifo(d / "s.csv")], "is not a regular file"),
    "flush-interval-of-hours": (
        lambda d: ["--wal-flush-interval-ms", str(3_600_000)],
        "--wal-flush-interval-ms",
    ),
    "zero-memtable-rows": (lambda d: ["--max-memtable-rows", "0"], "--max-memtable-rows"),
}


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _parquet(path: Path, rows: pa.Table) -> str:
    pq.write_table(rows, path)
    return str(path)


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def test_refused_ingests_never_claim_a_region(tmp_path: Path) -> None:
    """A claim bumps the region's epoch and fences its live writer: every check comes before any claim."""
    uri = make_table(tmp_path / "t", bucket_column="id", num_buckets=2)
    good = _parquet(tmp_path / "good.parquet", source_rows(200, offset=1000))
    with MemWalWriter(uri, durable_write=False) as live:
        live.put(source_rows(50, offset=500))  # claims both regions
        claimed = {r: m.writer_epoch for r, m in MemWalTable.open(uri).read_regions().items() if m}
        assert len(claimed) == 2
        for name, (make, message) in REFUSED_SOURCES.items():
            case = tmp_path / name
            case.mkdir()
            proc = run_cli("ingest", uri, good, *make(case))
            assert proc.returncode == 2, (name, proc.stderr)
            assert proc.stderr.count("\n") == 1 and message in proc.stderr, (name, proc.stderr)
            epochs = {r: m.writer_epoch for r, m in MemWalTable.open(uri).read_regions().items() if m}
            assert epochs == claimed, f"{name}: a refused ingest claimed a region"
        live.put(source_rows(50, offset=600))  # still the regions' writer: never fenced


@pytest.mark.parametrize(
    "options",
    [
        {"max_memtable_rows": 0},
        {"max_memtable_batches": 0},
        {"max_wal_flush_interval_ms": 3_600_000},
        {"max_memtable_size": -1},
        {"max_wal_buffer_size": 1.5},
        {"max_unflushed_memtable_bytes": True},
        {"durable_write": "yes"},
    ],
)
def test_writer_options_lance_would_check_only_after_claiming_are_refused_when_made(
    options: dict[str, Any],
) -> None:
    name = next(iter(options))
    with pytest.raises(BadInputError, match=f"writer option {name} must be"):
        WriterOptions(**options)


READ_PEAK = """
import sys
from memwal_core.model.table import MemWalTable
from memwal_core.spark_session import DAEMON_MODULE
from memwal_core.services.ingest.sources import resolve_sources
import pyarrow
from tests.support.peak_rss import high_water_kib
with MemWalTable.open(sys.argv[1]) as table:
    sources = resolve_sources([sys.argv[2]], None, table.storage_options)
    rows = sum(part.num_rows for path in sources.files for part in sources.read(path, table.schema))
print(rows, pyarrow.default_memory_pool().max_memory() >> 20, high_water_kib() >> 10)
"""
# The whole reading process, Lance's runtime included, stays under this; CI has seen 365 MiB.
READ_BUDGET_MIB = 512


def _json_lines(rows: pa.Table, path: Path) -> None:
    """JSON lines of the shared schema's columns, built by Arrow (json.dumps takes 3 s a million rows)."""
    text = {name: pc.cast(rows[name], pa.string()) for name in ("id", "score")}
    lines = pc.binary_join_element_wise(
        '{"id": ', text["id"], ', "name": "', rows["name"], '", "score": ', text["score"], "}\n", ""
    )
    with open(path, "wb") as out:
        for chunk in lines.chunks:
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)
            out.write(chunk.buffers()[2][offsets[chunk.offset] : offsets[chunk.offset + len(chunk)]])


SOURCE_WRITERS: dict[str, Callable[[pa.Table, Path], None]] = {
    "parquet": lambda rows, path: pq.write_table(rows, path, row_group_size=100_000),
    "csv": lambda rows, path: pcsv.write_csv(rows, path),
    "json": _json_lines,
}
# Two sizes each: a CSV's are both past the reach of Arrow's read-ahead (32 blocks), where it stops growing.
SOURCE_SIZES = {
    "parquet": (100_000, 4_000_000),
    "csv": (4_000_000, 8_000_000),
    "json": (1_000_000, 4_000_000),
}


@pytest.mark.parametrize("fmt", sorted(SOURCE_WRITERS))
def test_reading_a_source_holds_memory_flat_as_the_file_grows(tmp_path: Path, fmt: str) -> None:
    """A source's memory is set by its row groups or read-ahead, not its length.

    pyarrow's `iter_batches` grew with a Parquet file; Arrow's CSV reader reads
    up to 32 blocks ahead, which at 8 MiB blocks grew to 256 MiB on a large file;
    JSON was read whole. What is compared is the peak of Arrow's own allocations
    (every buffer a reader holds): the process's resident peak also holds what
    the allocator keeps of freed pages, which grew 20-45 MiB from 1M to 4M JSON
    rows and then stopped (4M and 8M alike), while Arrow's peak stayed at 37-41
    MiB; that margin failed CI on noise. The resident peak is held to a budget.
    """
    uri = make_table(tmp_path / "t")
    peaks = []
    for rows in SOURCE_SIZES[fmt]:
        keys = pa.array(range(rows), pa.int64())
        names = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int8()), ["n"]).cast(pa.string())
        path = tmp_path / f"rows-{rows}.{fmt}"
        SOURCE_WRITERS[fmt](pa.table({"id": keys, "name": names, "score": keys.cast(pa.float64())}), path)
        done = subprocess.run(
            [sys.executable, "-c", READ_PEAK, uri, str(path)],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        read, arrow_peak, resident_peak = map(int, done.stdout.split())
        assert read == rows
        assert resident_peak < READ_BUDGET_MIB, f"{rows} rows: resident peak {resident_peak} MiB"
        peaks.append(arrow_peak)
    assert peaks[1] - peaks[0] < 16, f"Arrow's peak MiB {peaks[0]} and {peaks[1]} at {SOURCE_SIZES[fmt]} rows"
