"""One batch of a merge round: hold its regions' leases, collapse, check, and commit once.

Per region nothing changes from merging it alone: its prefix is gap-free and
ascending, and its progress lands atomically with its rows (its marker rides
in the batch's one commit). What a batch adds is isolation: a region whose
collapse fails, whose lease is busy or lost, or that shares a key with
another region is left out and reported, and the others commit. A stale
commit (another merger moved a region) re-plans only the regions that moved,
dropping what is now merged, and re-collapses just those.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence, Set
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from typing import Any

import pyarrow as pa

from memwal_core.errors import (
    ConflictError,
    DeleteConflictError,
    LeaseBusyError,
    LeaseLostError,
    MemwalError,
    StaleMergeError,
    first_line,
)
from memwal_core.lance_errors import is_retries_exhausted
from memwal_core.model.details_lease import details_lease
from memwal_core.model.evolution import TableFields
from memwal_core.model.lease import Lease
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import AUTO
from memwal_core.services.engine import Engine
from memwal_core.services.merge.collapse import (
    BatchCollapse,
    RegionCollapse,
    collapse_in_process,
    shared_key,
    shared_key_error,
)
from memwal_core.services.merge.commit import (
    CommitPlan,
    base_rows_matching,
    choose_commit,
    commit_checked,
)
from memwal_core.services.merge.plan import RegionMergePlan
from memwal_core.services.merge.result import BatchResult, RegionMergeResult
from memwal_core.services.merge.staged import collapse_staged
from memwal_core.services.result import Failure
from memwal_core.storage.object_store import side_call
from memwal_core.storage.retry import RetryPolicy

log = logging.getLogger(__name__)

MAX_REPLANS = 8
# A merge renews its leases before each commit; a holder silent this long is presumed dead.
DEFAULT_LEASE_TTL = 300.0


@dataclass(frozen=True)
class _Committed:
    """What one successful commit reported."""

    stats: dict[str, int]
    version: int
    plan: CommitPlan
    # Base rows each region's deletes removed; they sum to Lance's `num_deleted_rows`.
    rows_deleted: dict[str, int]


@dataclass
class BatchOutcome:
    """What became of each region of a batch."""

    merged: list[RegionMergeResult] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    # Regions another merger took past this batch's target: nothing left for us in this round.
    overtaken: list[str] = field(default_factory=list)
    commit: BatchResult | None = None

    def fail(self, region: str, error: MemwalError) -> None:
        """Record a failed region (its one-line error is printed by whoever reports the round)."""
        self.failures.append(Failure.of(error, region))


def _is_retryable_conflict(exc: BaseException) -> bool:
    """Lance's own retries ran out, or a fenced delete met a commit: a fresh attempt (progress re-checked) may succeed."""
    return isinstance(exc, DeleteConflictError) or (isinstance(exc, OSError) and is_retries_exhausted(exc))


def has_key_index(dataset: Any, primary_key: tuple[str, ...]) -> bool:
    """Whether a scalar index covers the primary key (only then can a merge use one)."""
    return any(list(index.field_names or []) == list(primary_key) for index in dataset.describe_indices())


def deleted_shares(
    matching: Future[dict[str, int] | None], deleting: list[str], deleted: int
) -> dict[str, int]:
    """Each deleting region's share of the `deleted` rows, from the count `matching` (None: one region,
    whose share is all of them). The batch is committed by now, so a count that failed is a warning,
    never the batch's failure: its regions then report 0 each."""
    try:
        matched = matching.result()
    except (OSError, MemwalError, ValueError) as exc:
        log.warning(
            "regions %s: merged; their shares of the %d base rows deleted could not be counted (%s), "
            "so each reports 0",
            deleting,
            deleted,
            first_line(exc),
        )
        return dict.fromkeys(deleting, 0)
    if matched is None:
        return dict.fromkeys(deleting, deleted)
    if sum(matched.values()) != deleted:
        log.warning(
            "regions %s: %d base rows deleted, %d matched by their deletes before the commit "
            "(deletes re-applied after a concurrent merge)",
            deleting,
            deleted,
            sum(matched.values()),
        )
    return matched


class _Sources:
    """The collapsed parts of a batch and which part holds each region's current rows.

    A region re-collapsed after a stale commit moves to the new part; its rows
    in the old part are never read again.
    """

    def __init__(self) -> None:
        self.parts: list[BatchCollapse] = []
        self.owner: dict[str, int] = {}

    def add(self, part: BatchCollapse) -> None:
        self.parts.append(part)
        for region in part.regions:
            self.owner[region] = len(self.parts) - 1

    def _regions_of(self, index: int, regions: Set[str]) -> set[str]:
        return {r for r in regions if self.owner.get(r) == index}

    def live(self, regions: set[str], schema: pa.Schema) -> pa.Table:
        """The live rows of `regions`, whole in memory (at most the batch's budget): see `commit_batch`."""
        batches: Iterator[pa.RecordBatch] = chain.from_iterable(
            part.live(self._regions_of(i, regions)) for i, part in enumerate(self.parts)
        )
        return pa.Table.from_batches(list(batches), schema)

    def _tables(self, regions: Set[str], read: Callable[[BatchCollapse, set[str]], pa.Table]) -> pa.Table:
        tables = [read(part, self._regions_of(i, regions)) for i, part in enumerate(self.parts)]
        tables = [t for t in tables if t.num_rows]
        return pa.concat_tables(tables) if tables else pa.table({})

    def deleted_keys(self, regions: Set[str], *, labelled: bool = False) -> pa.Table:
        return self._tables(regions, lambda part, mine: part.deleted_keys(mine, labelled=labelled))

    def keys(self, regions: set[str]) -> pa.Table:
        return self._tables(regions, lambda part, mine: part.keys(mine))

    def figures(self, region: str) -> RegionCollapse:
        return self.parts[self.owner[region]].regions[region]

    def release(self) -> None:
        for part in self.parts:
            part.release()


class BatchMerge:
    """Merges one batch of region prefixes in one commit (see the module docstring)."""

    def __init__(
        self,
        table: MemWalTable,
        primary_key: tuple[str, ...],
        engine: Engine,
        *,
        retry: RetryPolicy,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        lease_wait: float = 0.0,
        commit_form: str = AUTO,
    ) -> None:
        self.commit_form = commit_form
        self.table = table
        self.primary_key = primary_key
        self.engine = engine
        self.retry = retry
        self.lease_ttl = lease_ttl
        self.lease_wait = lease_wait

    def run(self, index: int, batch: Sequence[RegionMergePlan]) -> BatchOutcome:
        outcome = BatchOutcome()
        # The table's columns (Lance opens its latest version) are read while the leases are taken.
        with side_call(self._table_fields) as columns:
            leases = self._hold(batch, outcome)
        try:
            held = [p for p in batch if p.region in leases]
            if held:
                self._merge(index, held, leases, outcome, columns)
        finally:
            # A committed region's lease ends with its commit: it names the generation merged.
            committed = {result.region for result in outcome.merged}
            unfinished = [lease for region, lease in leases.items() if region not in committed]
            self.table.store.map(lambda lease: lease.release(), unfinished)
        return outcome

    def _hold(self, batch: Sequence[RegionMergePlan], outcome: BatchOutcome) -> dict[str, Lease]:
        """Take every region's merge lease (in parallel); a busy region is skipped, as when merged alone,
        and a region whose lease cannot be read (a damaged record) fails alone."""

        def take(plan: RegionMergePlan) -> Lease | MemwalError | None:
            lease = Lease(
                self.table.store,
                f"merge-{plan.region}",
                ttl=self.lease_ttl,
                done_at=plan.target_generation,
                progress=plan.merged_before,
            )
            try:
                return lease.acquire(wait=self.lease_wait)
            except LeaseBusyError as exc:
                log.info("region %s: skipped, %s", plan.region, exc)
                return None
            except MemwalError as exc:
                return exc

        held: dict[str, Lease] = {}
        for region, got in zip([p.region for p in batch], self.table.store.map(take, batch), strict=True):
            if got is None:
                outcome.busy.append(region)
            elif isinstance(got, MemwalError):
                outcome.fail(region, got)
            else:
                held[region] = got
        return held

    def _table_fields(self) -> TableFields:
        return TableFields.of(self.table.dataset())

    def _collapse(
        self,
        plans: Sequence[RegionMergePlan],
        sources: _Sources,
        outcome: BatchOutcome,
        columns: Future[TableFields] | None = None,
    ) -> set[str]:
        """Collapse `plans` into a new part of `sources`; the regions that collapsed.

        The part is held in memory when the engine runs here, staged in the
        table's storage when it is remote (its tasks run in other processes).
        `columns`: the table's columns, being read already (else read now).
        """
        fields = columns.result() if columns is not None else self._table_fields()
        collapse = collapse_staged if self.engine.remote else collapse_in_process
        try:
            part: BatchCollapse = collapse(
                self.engine, plans, self.primary_key, fields, self.table.storage_options
            )
        except MemwalError as exc:
            for plan in plans:
                outcome.fail(plan.region, exc)
            return set()
        sources.add(part)
        for region, error in part.failures.items():
            outcome.fail(region, error)
        return set(part.regions)

    def _refuse_shared_keys(self, included: set[str], sources: _Sources, outcome: BatchOutcome) -> None:
        """Leave out every group of regions that hold the same key (corruption), until none does."""
        while len(included) > 1:
            found = shared_key(sources.keys(included), self.primary_key)
            if found is None:
                return
            key, regions = found
            error = shared_key_error(key, regions)
            for region in regions:
                outcome.fail(region, error)
                included.discard(region)

    def _keep_leases(self, included: set[str], leases: dict[str, Lease], outcome: BatchOutcome) -> None:
        """Renew what is due; a region whose lease was taken over is left out of the commit."""

        def keep(region: str) -> LeaseLostError | None:
            try:
                leases[region].ensure()
            except LeaseLostError as exc:
                return exc
            return None

        # Only the due ones go to the I/O pool: a thousand fresh leases cost it 40 ms of hand-offs.
        regions = sorted(r for r in included if leases[r].due())
        for region, lost in zip(regions, self.table.store.map(keep, regions), strict=True):
            if lost is not None:
                outcome.fail(region, lost)
                included.discard(region)

    def _merge(
        self,
        index: int,
        held: list[RegionMergePlan],
        leases: dict[str, Lease],
        outcome: BatchOutcome,
        columns: Future[TableFields],
    ) -> None:
        plans = {p.region: p for p in held}
        sources = _Sources()
        started = time.perf_counter()
        try:
            included = self._collapse(held, sources, outcome, columns)
            self._refuse_shared_keys(included, sources, outcome)
            collapsed_at = time.perf_counter()
            replans = 0
            while included:
                self._keep_leases(included, leases, outcome)
                if not included:
                    return
                try:
                    committed = self.retry.run(
                        partial(self._commit, plans, set(included), sources), _is_retryable_conflict
                    )
                except StaleMergeError as exc:
                    replans += 1
                    if replans > MAX_REPLANS:
                        self._fail_all(included, exc, outcome)
                        return
                    try:
                        redo = self._replan(plans, included, outcome)
                    except ConflictError as conflict:
                        self._fail_all(included, conflict, outcome)
                        return
                    included |= self._collapse(redo, sources, outcome) if redo else set()
                    self._refuse_shared_keys(included, sources, outcome)
                    collapsed_at = time.perf_counter()
                    continue
                except MemwalError as exc:
                    self._fail_all(included, exc, outcome)
                    return
                except OSError as exc:
                    self._fail_all(included, MemwalError(f"commit failed: {first_line(exc)}"), outcome)
                    return
                seconds = (collapsed_at - started, time.perf_counter() - collapsed_at)
                outcome.commit = self._record(
                    index, plans, included, sources, outcome, committed, replans, seconds
                )
                return
        finally:
            sources.release()

    @staticmethod
    def _fail_all(included: set[str], error: MemwalError, outcome: BatchOutcome) -> None:
        """The commit failed as a whole: every region still in it failed with it."""
        for region in sorted(included):
            outcome.fail(region, error)
        included.clear()

    def _commit(self, plans: dict[str, RegionMergePlan], included: set[str], sources: _Sources) -> _Committed:
        """One marked commit of every included region, then the same-region rebase check."""
        # The snapshot builder rewrites the progress this commit records: never both at once.
        with details_lease(self.table.store, ttl=self.lease_ttl):
            dataset = self.table.dataset()
            # Lance only refuses a target at or below recorded progress; a region another merger
            # took part of the way must be re-planned too, not merged again from its old start.
            recorded = self.table.index_details(dataset.version)
            moved = sorted(r for r in included if recorded.merged_generation(r) != plans[r].merged_before)
            if moved:
                raise StaleMergeError(f"regions {moved}: progress moved since they were planned")
            plan = choose_commit(
                sum(sources.figures(r).live_rows for r in included),
                sum(sources.figures(r).deleted_rows for r in included),
                int(dataset.count_rows()),
                has_key_index(dataset, self.primary_key),
                form=self.commit_form,
            )
            deleting = sorted(r for r in included if sources.figures(r).deleted_rows)
            # Each region's share of the rows deleted is counted on the version the commit starts from
            # while the commit runs: two Lance scans, each of which leaves a core idle part of the time.
            with side_call(partial(self._rows_matching, dataset, deleting, sources)) as matching:
                stats, version = commit_checked(
                    self.table,
                    dataset,
                    self.primary_key,
                    {r: plans[r].target_generation for r in included},
                    sources.live(included, dataset.schema),
                    sources.deleted_keys,
                    plan=plan,
                )
        return _Committed(
            stats, version, plan, deleted_shares(matching, deleting, stats.get("num_deleted_rows", 0))
        )

    def _rows_matching(self, dataset: Any, deleting: list[str], sources: _Sources) -> dict[str, int] | None:
        """How many base rows each of `deleting` deletes, read through a handle pinned to `dataset`'s
        version (the commit moves `dataset` on); None for one region: its share is the whole count."""
        if len(deleting) <= 1:
            return None
        pinned = dataset.checkout_version(dataset.version)
        # One read of every region's deleted keys: a staged part read per region cost a read of each of
        # its files per region.
        labelled = sources.deleted_keys(set(deleting), labelled=True)
        return base_rows_matching(pinned, self.primary_key, labelled, deleting)

    def _replan(
        self, plans: dict[str, RegionMergePlan], included: set[str], outcome: BatchOutcome
    ) -> list[RegionMergePlan]:
        """After a stale commit: drop what another merger merged; the moved regions to collapse again."""
        details = self.table.index_details()
        redo = []
        for region in sorted(included):
            merged = details.merged_generation(region)
            if merged == plans[region].merged_before:
                continue
            included.discard(region)
            rest = plans[region].after(merged)
            if rest is None:
                log.info("region %s: another merger merged it first", region)
                outcome.overtaken.append(region)
                continue
            log.info("region %s: another merger got to generation %d first; re-planning", region, merged)
            plans[region] = rest
            redo.append(rest)
        if not redo and included and not outcome.overtaken:
            raise ConflictError("merge commit reported stale progress, but no region's progress moved")
        return redo

    def _record(
        self,
        index: int,
        plans: dict[str, RegionMergePlan],
        included: set[str],
        sources: _Sources,
        outcome: BatchOutcome,
        committed: _Committed,
        replans: int,
        seconds: tuple[float, float],
    ) -> BatchResult:
        """Each region's result (its own rows and generations) and the batch's (Lance's figures)."""
        regions = sorted(included)
        seconds_collapse, seconds_commit = seconds
        for region in regions:
            f = sources.figures(region)
            result = RegionMergeResult(
                region=region,
                merged_generations=[g.generation for g in plans[region].generations],
                rows_upserted=f.live_rows,
                rows_deleted=committed.rows_deleted.get(region, 0),
                tombstones=f.deleted_rows,
                rows_read=f.rows_read,
                bytes_read=f.bytes_read,
                seconds_collapse=seconds_collapse,
                seconds_commit=seconds_commit,
                table_version=committed.version,
                replans=replans,
                batch=index,
            )
            outcome.merged.append(result)
            # Progress only: the figures are the report's, printed once.
            log.info("region %s: merged (batch %d, table v%d)", region, index, committed.version)
        stats = committed.stats
        return BatchResult(
            batch=index,
            regions=regions,
            generations=sum(len(plans[r].generations) for r in regions),
            rows_upserted=stats.get("num_inserted_rows", 0) + stats.get("num_updated_rows", 0),
            rows_deleted=stats.get("num_deleted_rows", 0),
            tombstones=sum(sources.figures(r).deleted_rows for r in regions),
            rows_read=sum(sources.figures(r).rows_read for r in regions),
            bytes_read=sum(sources.figures(r).bytes_read for r in regions),
            seconds_collapse=seconds_collapse,
            seconds_commit=seconds_commit,
            table_version=committed.version,
            commit_form=committed.plan.form,
            use_index=committed.plan.delete_index or committed.plan.upsert_index,
            commit_reason=committed.plan.reason,
            replans=replans,
        )
