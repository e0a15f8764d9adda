"""Ingestion: files into regions through MemWalWriter, locally and on Spark, and its refusals."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from memwal_core.services.ingest.service import ingest
from memwal_core.services.writer import WriterOptions
from memwal_core.table import MemWalTable
from tests.support.tables import tree_digest
from tests.test_writer import lsm_rows, make_table

ROOT = Path(__file__).resolve().parent.parent


def source_rows(n: int, *, offset: int = 0, tag: str = "s") -> pa.Table:
    keys = [offset + i for i in range(n)]
    return pa.table({"id": keys, "name": [f"{tag}{k}" for k in keys], "score": [k / 2 for k in keys]})


def model_of(*tables: pa.Table) -> dict[int, tuple[str, float]]:
    """The source deduplicated by key, later rows winning, on top of the three base rows."""
    model = {0: ("a", 0.0), 1: ("b", 1.0), 2: ("c", 2.0)}
    for table in tables:
        for row in table.to_pylist():
            model[row["id"]] = (row["name"], row["score"])
    return model


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=600,
    )


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


@pytest.mark.parametrize("buckets", [4, 16])
def test_spark_ingest_equals_the_source_deduplicated(spark: Any, tmp_path: Path, buckets: int) -> None:
    uri = make_table(tmp_path / "t", bucket_column="id", num_buckets=buckets)
    src = tmp_path / "src"
    src.mkdir()
    parts = [source_rows(50_000, offset=i * 40_000, tag=f"p{i}-") for i in range(6)]  # overlaps: duplicates
    for i, part in enumerate(parts):
        pq.write_table(part, src / f"part-{i}.parquet")
    duplicated = {
        k
        for a, b in itertools.pairwise(parts)
        for k in set(a["id"].to_pylist()) & set(b["id"].to_pylist())
    }
    # Duplicated keys carry different names per file; Spark does not define which wins, so compare them apart.
    result = ingest(MemWalTable.open(uri), [str(src)], engine="spark")
    assert result.rows_read == 300_000 and len(result.regions) == buckets
    rows = lsm_rows(uri)
    model = model_of(*parts)
    assert rows.keys() == model.keys()
    assert {k: v for k, v in rows.items() if k not in duplicated} == {
        k: v for k, v in model.items() if k not in duplicated
    }
    for k in duplicated:
        assert rows[k][1] == k / 2 and rows[k][0].endswith(f"-{k}")


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

    daemons = {p for p, c in commands.items() if "pyspark.daemon" in c and descends(p)}
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
                engine="spark",
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
            lambda d: pq.write_table(
                pa.table({"id": [1], "name": ["a"], "score": ["high"]}), d / "s.parquet"
            ),
            "column score: cannot cast",
        ),
        (lambda d: pq.write_table(source_rows(0), d / "s.parquet"), "the sources hold no rows"),
        (lambda d: None, "does not exist"),
    ],
    ids=["null-key", "missing-key", "bad-csv-value", "wrong-type", "empty", "missing-source"],
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
        from memwal_core.errors import BadInputError

        with pytest.raises(BadInputError, match=message):
            ingest(MemWalTable.open(uri), paths, engine="spark")
    assert tree_digest(tmp_path / "t") == before
