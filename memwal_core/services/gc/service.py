"""`gc`: plan, then (unless a dry run) execute, over every region of a table.

The Python API is a dry run unless told otherwise (`dry_run=False`): deleting
is the one thing a maintenance service cannot undo.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from memwal_core.arguments import checked
from memwal_core.errors import MemwalError
from memwal_core.model.clock import store_time
from memwal_core.model.outcomes import GC, Stored
from memwal_core.model.rules import check_rules, keep_rules
from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.execute import RegionGcOutcome, execute_region
from memwal_core.services.gc.plan import GcPlan, GenerationDir, RegionGcPlan, plan_gc
from memwal_core.services.gc.retention import write_wal_deleted
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.stored import stored_after
from memwal_core.services.gc.versions import write_oldest
from memwal_core.services.gc.wal_temps import write_dues
from memwal_core.services.outcome import recorded
from memwal_core.services.result import NOT_IN_JSON, Failure, ServiceResult

log = logging.getLogger(__name__)


def _done_regions(plan: GcPlan, outcomes: list[RegionGcOutcome], dry_run: bool) -> list[str]:
    """Regions whose plan ran (all of them in a dry run, as if it had)."""
    return [p.region for p in plan.regions] if dry_run else [o.region for o in outcomes]


@dataclass(frozen=True)
class GcResult(ServiceResult):
    """The outcome of one GC run (or, for a dry run, what it would do); it commits no table version.

    `deleted` names each directory by its full URI, so the result needs no table to be read.
    """

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"table_version": "read_version"}

    plan: GcPlan = field(repr=False, metadata=NOT_IN_JSON)
    outcomes: list[RegionGcOutcome] = field(metadata=NOT_IN_JSON)
    deleted: list[GenerationDir]
    seconds_plan: float
    seconds_execute: float
    requests: dict[str, int]

    @property
    def done_regions(self) -> list[str]:
        return _done_regions(self.plan, self.outcomes, self.dry_run)

    @property
    def stored(self) -> dict[str, Stored] | None:
        """What the table holds by kind once the run ended (`stored.py`); None if a region was not listed."""
        return stored_after(self.plan, self.outcomes, self.failures)

    def computed_json(self) -> dict[str, Any]:
        done = set(self.done_regions)
        pruned_in = {o.region: o.pruned_in_version for o in self.outcomes}
        plans = [p for p in self.plan.regions if p.region in done]
        return {
            "grace_seconds": self.plan.policy.grace_seconds,
            "maintained_indexes": list(self.plan.maintained_indexes),
            "retained_versions": len(self.plan.retained_versions),
            # `manifest_version`: the version that dropped it (None in a dry run, or when found already dropped).
            "pruned": [
                {
                    "region": p.region,
                    "generation": d.generation,
                    "path": d.path,
                    "manifest_version": pruned_in.get(p.region),
                }
                for p in plans
                for d in p.prune
            ],
            "kept": [k for p in self.plan.regions for k in p.kept],
            # WAL positions (a prefix, deleted by name from where the last run's deletes ended).
            "wal_entries": {
                "deleted": sum(len(p.wal_delete) for p in plans),
                "kept": {"fence_retention": sum(p.wal_kept for p in self.plan.regions)},
            },
            # What the fence retention alone keeps: covered WAL positions and manifest versions.
            "fence_retention": {
                "seconds": self.plan.policy.fence_retention_seconds,
                "wal_positions": sum(p.wal_kept for p in self.plan.regions),
                "manifest_versions": sum(p.manifest_kept for p in self.plan.regions),
            },
            "manifest_versions_deleted": sum(len(p.manifest_delete) for p in plans),
            "staging_files_deleted": len(self.plan.stale_staging),
            "wal_temp_files_deleted": sum(len(p.wal_temp_delete) for p in plans),
            "objects_deleted": sum(o.objects_deleted for o in self.outcomes)
            + (0 if self.dry_run else len(self.plan.stale_staging)),
            "bytes_deleted": sum(o.bytes_deleted for o in self.outcomes)
            + (0 if self.dry_run else sum(size for _path, size in self.plan.stale_staging)),
        }


@checked
@recorded(GC, lambda result: [p.region for p in result.plan.regions], lambda result: result.stored)
def gc(
    table: MemWalTable,
    *,
    dry_run: bool = True,
    policy: GcPolicy | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> GcResult:
    """Delete what is provably unneeded (a dry run by default).

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     print(gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0)).to_json()["deleted"])
    """
    table.store.stats.reset()
    started = time.perf_counter()
    # A table kept under newer rules is refused, a dry run too: what it would print is not what they keep.
    rules = check_rules(table.store)
    # Ages are judged by the store's clock, and a host whose clock disagrees refuses before any delete.
    # A dry run writes nothing, so it cannot read the store's clock: it plans by this host's.
    plan = plan_gc(
        table, policy or GcPolicy(), clock=time.time if dry_run else partial(store_time, table.store)
    )
    if not dry_run:
        keep_rules(table.store, rules)
    return execute_gc(table, plan, dry_run=dry_run, progress=progress, started=started)


def execute_gc(
    table: MemWalTable,
    plan: GcPlan,
    *,
    dry_run: bool,
    progress: Callable[[int, int, str], None] | None = None,
    started: float | None = None,
) -> GcResult:
    """Carry out a plan (`plan_gc`), region by region; `started`: when planning began (perf_counter)."""
    planned = time.perf_counter()
    started = planned if started is None else started
    outcomes: list[RegionGcOutcome] = []
    failures = list(plan.failures)
    work = [p for p in plan.regions if p.has_work]
    if not dry_run:
        # Regions are independent, one per thread of the store's pool; each one's steps stay in order.
        done = itertools.count(1)

        def run(region_plan: RegionGcPlan) -> RegionGcOutcome | Failure:
            region = region_plan.region
            try:
                outcome = execute_region(table.store, table.region_store(region), region_plan)
            except MemwalError as exc:
                return Failure.of(exc, region)
            log.info(
                "region %s: %d directories, %d WAL entries, %d manifest versions deleted",
                region,
                len(outcome.deleted_dirs),
                outcome.wal_deleted,
                outcome.manifest_versions_deleted,
            )
            if progress is not None:
                progress(next(done), len(work), region)
            return outcome

        for result in table.store.map(run, work):
            if isinstance(result, Failure):
                failures.append(result)
            else:
                outcomes.append(result)
        if plan.stale_staging:
            table.store.delete_many([path for path, _size in plan.stale_staging])
            log.info("%d abandoned staging file(s) deleted", len(plan.stale_staging))
        failed = {f.region for f in failures if f.region}
        dues = plan.wal_temp_dues_after(failed)
        if dues is not None:
            write_dues(table.store, dues)
        oldest = plan.oldest_versions_after(failed)
        if oldest is not None:
            write_oldest(table.store, oldest)
        wal_deleted = plan.wal_deleted_after(failed)
        if wal_deleted is not None:
            write_wal_deleted(table.store, wal_deleted)
    ran = set(_done_regions(plan, outcomes, dry_run))
    finished = time.perf_counter()
    return GcResult(
        table=table.uri,
        read_version=plan.table_version,
        dry_run=dry_run,
        failures=failures,
        seconds=finished - started,
        plan=plan,
        outcomes=outcomes,
        deleted=[d.described(table) for p in plan.regions if p.region in ran for d in p.deleted_dirs],
        seconds_plan=planned - started,
        seconds_execute=finished - planned,
        requests=table.store.stats.snapshot(),
    )
