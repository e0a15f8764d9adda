"""`consistency`: does the MemWAL-aware read agree with the base table plus the pending generations?

A second opinion on the LSM view before anything is deleted: the expected
rows are computed independently of Lance's LSM readers (base-table keys, then
each region's pending generations collapsed by the local merge engine, newest
wins, tombstones delete), and compared with Lance's LSM scanner on the row
count and with its rows for a sample of keys (pending upserts,
pending deletes and untouched base rows). Reads only key columns of the base
table in full; everything else is sampled. With nothing pending the LSM read is
the base table itself: the check passes reading no data (a scheduled check of
an idle table costs its region reads only).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from memwal_core.errors import MemwalError, first_line
from memwal_core.model.evolution import TableFields
from memwal_core.model.lance_filter import equals
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.collapse import collapse_local
from memwal_core.services.merge.plan import GenerationSource
from memwal_core.services.reader import ReadPlan, plan_read
from memwal_core.services.reader import lsm_scanner as build_scanner
from memwal_core.services.result import Failure, ServiceResult

Key = tuple[Any, ...]


# Mismatches shown in the JSON: one broken generation can mismatch every probe.
MISMATCHES_SHOWN = 20
# A region's directory in a path an error quotes (Lance's errors name the file they could not read).
_REGION_IN_PATH = re.compile(r"_mem_wal/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


class _RegionUnreadable(Exception):
    """A region's pending generations could not be read while building the expected rows."""

    def __init__(self, region: str, error: BaseException) -> None:
        super().__init__(first_line(error))
        self.region = region


@dataclass(frozen=True)
class ConsistencyResult(ServiceResult):
    """The comparison at one table version (`read_version`); `passed` only if every probe agreed."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"table_version": "read_version"}

    expected_rows: int
    lsm_rows: int
    sampled_keys: int
    mismatches: list[str]
    # Generations the read plan holds; with none, the LSM read is the base table and is not compared.
    pending_generations: int = 0

    @property
    def passed(self) -> bool:
        return not self.mismatches and not self.failures

    @property
    def explanation(self) -> str:
        """Why the check failed, in one line (or that it passed)."""
        if self.failures:
            return f"not checked: {self.failures[0].message}"
        if self.mismatches:
            more = len(self.mismatches) - 1
            return self.mismatches[0] + (f" (and {more} more mismatches)" if more else "")
        if not self.pending_generations:
            return f"nothing pending: the LSM read is the base table ({self.lsm_rows} rows)"
        return f"{self.lsm_rows} rows agree; {self.sampled_keys} sampled keys agree"

    def computed_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "mismatches": self.mismatches[:MISMATCHES_SHOWN]}


def _keys(rows: pa.Table, primary_key: list[str]) -> list[Key]:
    columns = [rows.column(k).to_pylist() for k in primary_key]
    return list(zip(*columns, strict=True))


def check_consistency(table: MemWalTable, *, sample: int = 64, seed: int | None = None) -> ConsistencyResult:
    """Compare Lance's LSM read with an independent model of base + pending generations.

    A generation that cannot be read (by the model or by Lance) fails the check
    with that reason instead of raising: the check's job is to say "not safe".
    The failure names the region it could not read (under `failures`), when the
    error names one.
    """
    started = time.perf_counter()
    plan = plan_read(table)
    try:
        return _compare(table, plan, sample=sample, seed=seed, started=started)
    except (_RegionUnreadable, MemwalError, OSError, ValueError) as exc:
        message = first_line(exc)
        named = _REGION_IN_PATH.search(message)
        region = exc.region if isinstance(exc, _RegionUnreadable) else named.group(1) if named else None
        return ConsistencyResult(
            table=table.uri,
            read_version=plan.table_version,
            seconds=time.perf_counter() - started,
            failures=[Failure(region, f"LSM read failed: {message}")],
            expected_rows=0,
            lsm_rows=0,
            sampled_keys=0,
            mismatches=[],
        )


def _compare(
    table: MemWalTable, plan: ReadPlan, *, sample: int, seed: int | None, started: float
) -> ConsistencyResult:
    base = table.dataset(plan.table_version)
    pending = sum(len(region.generations) for region in plan.regions)
    if pending:
        expected_rows, lsm_rows, sampled, mismatches = _against_model(table, plan, base, sample, seed)
    else:  # nothing to compare: the LSM read is the base table, and a check of an idle table reads no data
        expected_rows = lsm_rows = base.count_rows()
        sampled, mismatches = 0, []
    return ConsistencyResult(
        table=table.uri,
        read_version=plan.table_version,
        seconds=time.perf_counter() - started,
        expected_rows=expected_rows,
        lsm_rows=lsm_rows,
        sampled_keys=sampled,
        mismatches=mismatches,
        pending_generations=pending,
    )


def _against_model(
    table: MemWalTable, plan: ReadPlan, base: Any, sample: int, seed: int | None
) -> tuple[int, int, int, list[str]]:
    """Lance's LSM read against the model: the expected and the LSM row counts, the keys sampled, and
    every mismatch."""
    import pandas as pd  # imported here: a quarter second that most commands never need

    primary_key = list(table.primary_key)
    fields = TableFields.of(base)
    upserts: dict[Key, dict[str, Any]] = {}
    deletes: set[Key] = set()
    for region in plan.regions:
        if not region.generations:
            continue
        sources = [
            GenerationSource(g, f"{plan.table_uri}/_mem_wal/{region.region}/{path}")
            for g, path in region.generations
        ]
        try:
            live, deleted = collapse_local(sources, region.region, primary_key, fields, table.storage_options)
        except (MemwalError, OSError, ValueError) as exc:
            raise _RegionUnreadable(region.region, exc) from exc
        for row in live.to_pylist():
            key = tuple(row[k] for k in primary_key)
            upserts[key] = row
            deletes.discard(key)
        for key in _keys(deleted, primary_key):
            deletes.add(key)
            upserts.pop(key, None)
    base_keys = base.to_table(columns=primary_key)
    frame = pd.DataFrame({k: base_keys.column(k).to_pandas() for k in primary_key})
    touched = [*upserts, *deletes]
    in_base = pd.MultiIndex.from_frame(frame).isin(touched).sum() if touched and len(frame) else 0
    untouched = len(frame) - int(in_base)
    expected_rows = untouched + len(upserts)
    lsm_rows = build_scanner(table, plan).project(primary_key).to_table().num_rows

    mismatches = []
    if lsm_rows != expected_rows:
        mismatches.append(f"LSM read has {lsm_rows} rows, base plus pending generations {expected_rows}")
    rng = random.Random(seed)
    probes: list[tuple[Key, dict[str, Any] | None]] = [
        (k, upserts[k]) for k in rng.sample(sorted(upserts, key=repr), min(len(upserts), sample // 2))
    ]
    probes += [(k, None) for k in rng.sample(sorted(deletes, key=repr), min(len(deletes), sample // 4))]
    if len(frame) and (left := sample - len(probes)) > 0:
        positions = sorted(rng.sample(range(len(frame)), min(len(frame), left)))
        for row in base.take(positions).to_pylist():
            key = tuple(row[k] for k in primary_key)
            probes.append((key, upserts.get(key) if key in upserts else None if key in deletes else row))
    found = _lookup(table, plan, fields.schema.names, [key for key, _expected in probes])
    for key, expected in probes:
        actual = found.get(key)
        if actual != expected:
            mismatches.append(f"key {key}: LSM lookup gives {actual}, expected {expected}")
    return expected_rows, lsm_rows, len(probes), mismatches


def _lookup(
    table: MemWalTable, plan: ReadPlan, names: list[str], keys: list[Key]
) -> dict[Key, dict[str, Any]]:
    """Lance's LSM read of `keys`: one scan filtered to them, newest row per key.

    Not Lance's `LsmPointLookupPlanner`: Lance 14 opens the generation datasets
    of a point lookup without the table's storage options, so on S3 with
    credentials given as options every lookup failed (docs/lance-issues.md).
    The scan opens them with the options, and answers every probe in one pass.
    """
    if not keys:
        return {}
    primary_key = list(table.primary_key)
    condition = " OR ".join(
        "(" + " AND ".join(equals(k, v) for k, v in zip(primary_key, key, strict=True)) + ")" for key in keys
    )
    rows = build_scanner(table, plan).project(names).filter(condition).to_table().to_pylist()
    return {tuple(row[k] for k in primary_key): {name: row[name] for name in names} for row in rows}
