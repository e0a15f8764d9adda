"""`merge`: one round over the table: plan every region with work, then merge them in batches.

A batch is one commit for many regions (see `batch.py` for why and how it is
bounded, `batch_merge.py` for how one is merged). A region that fails, is
busy or was overtaken is dropped from the rest of the round; the others go
on. Each region still merges strictly in ascending generation order: its
later prefixes only ever go into later batches.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from memwal_core.arguments import Count, Seconds, checked
from memwal_core.model.details_lease import check_details_lease
from memwal_core.model.outcomes import MERGE
from memwal_core.model.table import MemWalTable
from memwal_core.process_memory import release_freed
from memwal_core.services.defaults import AUTO
from memwal_core.services.engine import Engine, LocalEngine
from memwal_core.services.merge.batch import MergeBudget, next_batch
from memwal_core.services.merge.batch_merge import DEFAULT_LEASE_TTL, BatchMerge
from memwal_core.services.merge.commit import check_commit_form
from memwal_core.services.merge.plan import MergePlan, RegionMergePlan, plan_merge
from memwal_core.services.merge.result import BatchResult, MergeResult, RegionMergeResult
from memwal_core.services.outcome import recorded
from memwal_core.storage.lance_datasets import load_lance_meanwhile
from memwal_core.storage.object_store import side_call
from memwal_core.storage.retry import RetryPolicy

log = logging.getLogger(__name__)

# Called after each batch with (regions done, regions planned, the last region done).
Progress = Callable[[int, int, str], None]


def preview_batches(plan: MergePlan, budget: MergeBudget) -> list[dict[str, Any]]:
    """The batches a round would commit, if nothing changed meanwhile (for `--dry-run`)."""
    preview: list[dict[str, Any]] = []
    pending: list[RegionMergePlan] = list(plan.regions)
    while pending:
        batch, pending = next_batch(pending, budget)
        preview.append(
            {
                "batch": len(preview) + 1,
                "regions": [p.region for p in batch],
                "generations": sum(len(p.generations) for p in batch),
                "rows": sum(p.rows for p in batch),
                "bytes": sum(p.bytes for p in batch),
            }
        )
    return preview


@checked
@recorded(MERGE, lambda result: [r.region for r in result.regions])
def merge(
    table: MemWalTable,
    *,
    regions: Iterable[str] | None = None,
    max_generations: Count | None = None,
    engine: Engine | None = None,
    budget: MergeBudget | None = None,
    dry_run: bool = False,
    retry: RetryPolicy | None = None,
    lease_ttl: Seconds = DEFAULT_LEASE_TTL,
    lease_wait: Seconds = 0.0,
    commit_form: str = AUTO,
    progress: Progress | None = None,
    max_seconds: Seconds | None = None,
    manifest_versions: Mapping[str, int] | None = None,
    polled_at: float | None = None,
) -> MergeResult:
    """Merge pending generations of every region (or the named ones) in one round of batches.

    `max_generations` caps what each region merges in this round; `budget`
    caps what one batch collapses (default: a share of the machine's memory);
    `commit_form` forces how batches commit (see `commit.py`; default: chosen per commit);
    `engine` runs the collapse (default: `LocalEngine()`, threads of this process); it chooses by the
    round's backlog (`Engine.for_round`), so `SparkWhereItPays` keeps a small round in this process;
    `manifest_versions`: per region, a manifest version a poller just read (where reading the
    region starts: `plan_merge`), and `polled_at`, when it saw them current (moments ago: they are
    read as they are); `max_seconds` ends the round after the batch that outlasts it (the regions not
    reached are `deferred_regions`, left for the next round), so an orchestrator can
    bound how long a healthy round runs.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     result = merge(table, max_generations=8)
        ...     print(result.to_json()["generations_merged"])
    """
    check_commit_form(commit_form)
    engine = engine or LocalEngine()
    budget = budget or MergeBudget.default()
    retry = retry or RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)
    started = time.perf_counter()
    table.store.stats.reset()
    if not dry_run:
        load_lance_meanwhile()  # while the round plans and takes its leases: its batches open generations
    # A round with work first checks the details lease every commit takes: beside the plan.
    check = (lambda: None) if dry_run else partial(check_details_lease, table.store, ttl=lease_ttl)
    with side_call(check) as details_lease:
        plan = plan_merge(
            table,
            regions=regions,
            max_generations=max_generations,
            manifest_versions=manifest_versions,
            polled_at=polled_at,
        )
    engine, engine_reason = engine.for_round(
        sum(p.rows for p in plan.regions), sum(p.bytes for p in plan.regions)
    )
    planned = time.perf_counter()
    merged: list[RegionMergeResult] = []
    batches: list[BatchResult] = []
    failures = list(plan.failures)
    busy: list[str] = []
    deferred: list[str] = []
    if not dry_run:
        if plan.regions:
            details_lease.result()
        merger = BatchMerge(
            table,
            plan.primary_key,
            engine,
            retry=retry,
            lease_ttl=lease_ttl,
            lease_wait=lease_wait,
            commit_form=commit_form,
        )
        total = len(plan.regions)
        pending: list[RegionMergePlan] = list(plan.regions)
        for index in itertools.count(1):
            if (
                pending
                and max_seconds is not None
                and index > 1
                and time.perf_counter() - started > max_seconds
            ):
                deferred = sorted({p.region for p in pending})
                log.info(
                    "%d region(s) left for the next round: the round's %g s are spent",
                    len(deferred),
                    max_seconds,
                )
                break
            if not pending:
                break
            batch, pending = next_batch(pending, budget)
            outcome = merger.run(index, batch)
            # The batch's rows are released by now: hand their pages back before the next batch.
            release_freed()
            merged.extend(outcome.merged)
            failures.extend(outcome.failures)
            busy.extend(outcome.busy)
            if outcome.commit is not None:
                batches.append(outcome.commit)
            # A region that did not merge this prefix cannot merge a later one in this round.
            stopped = {f.region for f in outcome.failures} | set(outcome.busy) | set(outcome.overtaken)
            pending = [p for p in pending if p.region not in stopped]
            if progress is not None:
                waiting = {p.region for p in pending}
                done = total - len(waiting)
                progress(done, total, batch[-1].region)
    return MergeResult(
        table=table.uri,
        read_version=plan.table_version,
        new_version=max((b.table_version for b in batches), default=None),
        dry_run=dry_run,
        failures=failures,
        seconds=time.perf_counter() - started,
        engine=engine.name,
        engine_reason=engine_reason,
        regions=merged,
        batches=batches,
        busy_regions=busy,
        deferred_regions=deferred,
        seconds_plan=planned - started,
        plan=plan,
        planned_batches=preview_batches(plan, budget) if dry_run else [],
        max_batch_rows=budget.max_rows,
        max_batch_bytes=budget.max_bytes,
        requests=table.store.stats.snapshot(),
    )
