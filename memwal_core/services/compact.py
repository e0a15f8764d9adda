"""`compact`: rewrite the base table's small fragments with Lance's distributed compaction.

Merges leave many small fragments with deletion files behind; readers pay for
each. Lance plans the rewrite (`Compaction.plan`, tasks that pickle), each task
rewrites a group of fragments, and one commit swaps them in (`Compaction.commit`,
which also remaps indexes and keeps the MemWAL index details). The tasks run
on the given engine (`services/engine.py`): one Spark task per Lance task
(pylance imported on the executor), or threads of this process.

Coexistence with merges: a compaction commit (Rewrite) and a merge commit
(Update) over the same fragments conflict, and Lance then rejects the
compaction (measured: "Rewrite transaction was preempted by concurrent
transaction Update"), so under a steady merge load an optimistic compaction
would starve. Instead compaction plans, executes and commits while holding
the table's index-details lease, which every merge commit also takes: merges
keep collapsing meanwhile and wait only at their commit, for at most one
bounded compaction (`max_tasks` tasks), and neither can discard the other's
work. The lease is renewed between steps and checked before the commit.

Lance 14 drops the index catch-up record of the indexes a rewrite touches
(measured; the indexes themselves are remapped and answer), so compaction
ends with an incremental catch-up of exactly those indexes.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from memwal_core.arguments import Count, Range, Seconds, checked
from memwal_core.errors import BadInputError, first_line
from memwal_core.lance_errors import is_preempted
from memwal_core.model.details_lease import details_lease
from memwal_core.model.indexes import read_maintained
from memwal_core.model.table import MemWalTable
from memwal_core.services.catchup import catchup
from memwal_core.services.defaults import DEFAULT_DELETION_THRESHOLD, DEFAULT_MAX_TASKS, DEFAULT_TARGET_ROWS
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.result import NOT_IN_JSON, ServiceResult
from memwal_core.storage.lance_datasets import open_dataset
from memwal_core.storage.object_store import absolute_uri

log = logging.getLogger(__name__)

# A rewrite preempted by a commit outside the details lease is planned again, at most this many times in all.
COMMIT_ATTEMPTS = 3


@dataclass(frozen=True)
class CompactionPlan:
    """Lance's rewrite tasks (pickled) for one table version, at most `max_tasks` of them."""

    table_uri: str
    read_version: int
    options: dict[str, Any]
    tasks: tuple[bytes, ...]
    rows: int
    bytes: int
    fragments_before: int
    tasks_left_out: int


@dataclass(frozen=True)
class CompactionResult(ServiceResult):
    """What one compaction rewrote; `new_version` is the table after its commit (and catch-up)."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"table_version": "version_after"}

    engine: str
    # Why the rewrite ran on `engine`: "named", or its size against the Spark threshold.
    engine_reason: str
    plan: CompactionPlan = field(repr=False, metadata=NOT_IN_JSON)
    fragments_before: int
    fragments_after: int
    fragments_removed: int
    fragments_added: int
    rows_rewritten: int
    seconds_plan: float
    seconds_execute: float
    seconds_commit: float
    catchup_restored: list[str] = field(default_factory=list)

    def computed_json(self) -> dict[str, Any]:
        return {"tasks": len(self.plan.tasks), "tasks_left_out": self.plan.tasks_left_out}


def plan_compaction(
    table: MemWalTable,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    deletion_threshold: float = DEFAULT_DELETION_THRESHOLD,
    max_tasks: int = DEFAULT_MAX_TASKS,
) -> CompactionPlan:
    """Lance's compaction plan at the latest version, cut to `max_tasks` tasks."""
    from lance.optimize import Compaction, CompactionOptions

    if target_rows_per_fragment < 1 or max_tasks < 1 or not 0.0 <= deletion_threshold <= 1.0:
        raise BadInputError(
            "compaction needs target rows >= 1, max tasks >= 1 and a deletion threshold in [0, 1]"
        )
    dataset = table.dataset()
    options = CompactionOptions(
        target_rows_per_fragment=target_rows_per_fragment,
        materialize_deletions=True,
        materialize_deletions_threshold=deletion_threshold,
    )
    plan = Compaction.plan(dataset, options)
    chosen = plan.tasks[:max_tasks]
    return CompactionPlan(
        table.uri,
        int(plan.read_version),
        dict(options),
        tuple(pickle.dumps(task) for task in chosen),
        sum(f.physical_rows for task in chosen for f in task.fragments),
        sum(d.file_size_bytes or 0 for task in chosen for f in task.fragments for d in f.files),
        len(dataset.get_fragments()),
        max(0, plan.num_tasks() - max_tasks),
    )


def _rewrite_task(uri: str, version: int, storage_options: Mapping[str, str]) -> Callable[[bytes], bytes]:
    """What one engine task runs: unpickle a Lance rewrite task, execute it, pickle its result.

    The table's URI is absolute: a remote task may run in another working directory.
    """
    absolute = absolute_uri(uri)

    def run(blob: bytes) -> bytes:
        dataset = open_dataset(absolute, storage_options, version=version)
        return pickle.dumps(pickle.loads(blob).execute(dataset))

    return run


@checked
def compact(
    table: MemWalTable,
    *,
    engine: Engine | None = None,
    target_rows_per_fragment: Count = DEFAULT_TARGET_ROWS,
    deletion_threshold: Annotated[float, Range(0, 1)] = DEFAULT_DELETION_THRESHOLD,
    max_tasks: Count = DEFAULT_MAX_TASKS,
    dry_run: bool = False,
    lease_wait: Seconds | None = None,
) -> CompactionResult:
    """Compact the base table's fragments, holding the index-details lease so merges wait, not lose.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     print(compact(table, target_rows_per_fragment=100_000).to_json()["fragments_after"])
    """
    from lance.optimize import Compaction

    engine = engine or LocalEngine()

    def make_plan() -> CompactionPlan:
        return plan_compaction(
            table,
            target_rows_per_fragment=target_rows_per_fragment,
            deletion_threshold=deletion_threshold,
            max_tasks=max_tasks,
        )

    started = time.perf_counter()
    if dry_run:
        plan = make_plan()
        chosen = engine.for_round(plan.rows, plan.bytes)
        seconds = time.perf_counter() - started
        return CompactionResult(
            table=table.uri,
            read_version=plan.read_version,
            dry_run=True,
            seconds=seconds,
            engine=chosen.engine.name,
            engine_reason=chosen.reason,
            plan=plan,
            fragments_before=plan.fragments_before,
            fragments_after=plan.fragments_before,
            fragments_removed=0,
            fragments_added=0,
            rows_rewritten=plan.rows,
            seconds_plan=seconds,
            seconds_execute=0.0,
            seconds_commit=0.0,
        )
    with details_lease(table.store, wait=lease_wait) as lease:
        caught_up_before = table.index_details().index_catchup
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            plan = make_plan()
            chosen = engine.for_round(plan.rows, plan.bytes)
            planned = time.perf_counter()
            rewrite = _rewrite_task(plan.table_uri, plan.read_version, table.storage_options)
            what = f"compaction ({len(plan.tasks)} rewrite task(s))"
            results = [pickle.loads(blob) for blob in chosen.engine.run(rewrite, plan.tasks, what=what)]
            executed = time.perf_counter()
            lease.ensure()  # LeaseLostError here, before the commit, if a merger took over meanwhile
            try:
                metrics = Compaction.commit(table.dataset(), results) if results else None
            except OSError as exc:
                # Merges wait for the lease, but a commit that does not take it (another client of the
                # table) may land on the fragments being rewritten: Lance refuses the rewrite, and it is
                # planned again on the version that commit made.
                if attempt == COMMIT_ATTEMPTS or not is_preempted(exc):
                    raise
                log.warning("compaction: %s; planning it again (attempt %d)", first_line(exc), attempt + 1)
                continue
            break
        removed, added = (metrics.fragments_removed, metrics.fragments_added) if metrics else (0, 0)
        after = table.index_details()
    # Lance 14 drops the catch-up record of every index a rewrite touched, although
    # the indexes are remapped; an incremental catch-up writes it again at once. Lance
    # records every index, so only the maintained ones are ours to restore.
    maintained = set(read_maintained(table, after).names)
    dropped = sorted(
        n
        for n, regions in caught_up_before.items()
        if n in maintained and after.index_catchup.get(n) != regions
    )
    if dropped:
        catchup(table, indexes=dropped)
    latest = table.dataset()
    finished = time.perf_counter()
    return CompactionResult(
        table=table.uri,
        read_version=plan.read_version,
        new_version=latest.version if results else None,
        seconds=finished - started,
        engine=chosen.engine.name,
        engine_reason=chosen.reason,
        plan=plan,
        fragments_before=plan.fragments_before,
        fragments_after=len(latest.get_fragments()),
        fragments_removed=removed,
        fragments_added=added,
        rows_rewritten=sum(f.physical_rows for r in results for f in r.new_fragments),
        seconds_plan=planned - started,
        seconds_execute=executed - planned,
        seconds_commit=finished - executed,
        catchup_restored=dropped,
    )
