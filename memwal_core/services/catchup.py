"""`catchup`: bring the base-table indexes the MemWAL maintains up to date with merged data.

An index is caught up for a region when Lance records, in the MemWAL index
details, that it covers that region's merged generations (`index_catchup`;
Lance derives it at every commit from the indexes' fragment coverage). Lag
per region is merged minus caught up (an index missing from the record is
not caught up at all). An incremental `optimize_indices` adds the merged
fragments to an index; where that does not bring it level, the index is
retrained from the data (a rebuild). Either way we re-read the details
afterwards and fail loudly if catch-up did not reach the progress we read.

Which indexes are maintained is `model.indexes`' rule. A full catch-up first
brings the details' `maintained_indexes` list in step with that rule
(`services.index_list`), so an index created after `memwal init` is listed
for readers that know only the list, such as LanceDB.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from memwal_core.arguments import checked
from memwal_core.errors import CatchupError, NotFoundError
from memwal_core.format.index_details import IndexDetails
from memwal_core.model.indexes import read_maintained
from memwal_core.model.outcomes import CATCHUP
from memwal_core.model.table import MemWalTable
from memwal_core.services.index_list import ListUpdate, read_region_manifests, update_maintained_list
from memwal_core.services.outcome import recorded
from memwal_core.services.result import NOT_IN_JSON, ServiceResult
from memwal_core.storage.object_store import side_call

if TYPE_CHECKING:
    import lance

Lag = dict[str, int]


def index_lag(details: IndexDetails, index: str) -> Lag:
    """Per merged region: merged generation minus the generation `index` has caught up to."""
    caught_up = details.index_catchup.get(index, {})
    return {
        region: merged - caught_up.get(region, 0)
        for region, merged in sorted(details.merged.items())
        if merged > 0
    }


@dataclass(frozen=True)
class IndexState:
    """What a catch-up sensor or check needs: each maintained index's largest lag, and whether
    the details' `maintained_indexes` list needs a rewrite (an index created or dropped since)."""

    table_version: int
    max_lag: dict[str, int]
    list_outdated: bool

    @property
    def needs_catchup(self) -> bool:
        return self.list_outdated or any(lag > 0 for lag in self.max_lag.values())


def index_state(table: MemWalTable) -> IndexState:
    """The maintained indexes' lag and the list's state at the latest table version."""
    dataset = table.dataset()
    details = table.index_details(dataset.version)
    rule = read_maintained(table, details, dataset)
    lags = {name: max(index_lag(details, name).values(), default=0) for name in rule.names}
    return IndexState(details.table_version, lags, rule.list_outdated)


@dataclass(frozen=True)
class IndexCatchupPlan:
    """One maintained index and its lag at the planned table version."""

    index: str
    lag: tuple[tuple[str, int], ...]

    @property
    def behind(self) -> bool:
        return any(lag > 0 for _region, lag in self.lag)


@dataclass(frozen=True)
class CatchupPlan:
    """Which indexes to bring up to date, read at one table version."""

    table_uri: str
    table_version: int
    merged: tuple[tuple[str, int], ...]
    indexes: tuple[IndexCatchupPlan, ...]
    missing: tuple[str, ...] = ()
    # Indexes the details' list should gain: their coverage needs every region's manifest.
    list_added: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """What a dry run shows of it (the `plan` of `catchup --dry-run --json`): each index's lag."""
        return {
            "table": self.table_uri,
            "table_version": self.table_version,
            "indexes": {p.index: dict(p.lag) for p in self.indexes},
            "missing_indexes": list(self.missing),
        }


@dataclass(frozen=True)
class IndexCatchupResult:
    """What catch-up did for one index (`seconds`: the update that covered it; lagging indexes share one)."""

    index: str
    method: str
    lag_before: Lag
    lag_after: Lag
    seconds: float


@dataclass(frozen=True)
class CatchupResult(ServiceResult):
    """The outcome of one catch-up run over a table (`new_version`: the update's or the list's commit)."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {
        "planned_at_version": "read_version",
        "table_version": "version_after",
        "seconds_total": "seconds",
    }

    indexes: list[IndexCatchupResult]
    plan: CatchupPlan | None = field(default=None, repr=False, metadata=NOT_IN_JSON)
    # The `maintained_indexes` list brought in step with the rule first.
    maintained_list: ListUpdate | None = None
    # The run's storage requests through memwal's store, by operation (Lance's are not seen there).
    requests: dict[str, int] = field(default_factory=dict)

    def computed_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"missing_indexes": list(self.plan.missing) if self.plan else []}
        if self.dry_run and self.plan is not None:
            payload["plan"] = self.plan.summary()
        return payload


def plan_catchup(table: MemWalTable, *, indexes: Iterable[str] | None = None) -> CatchupPlan:
    """Measure the lag of every maintained index (or of the named ones)."""
    dataset = table.dataset()
    details = table.index_details(dataset.version)
    rule = read_maintained(table, details, dataset)
    maintained = list(rule.names)
    wanted = sorted(set(indexes)) if indexes is not None else maintained
    unknown = [name for name in wanted if name not in maintained]
    if unknown:
        raise NotFoundError(
            f"table {table.uri} has no index {unknown[0]!r} maintained by the MemWAL "
            f"(maintained: {', '.join(maintained) or 'none'})"
        )
    return CatchupPlan(
        table.uri,
        details.table_version,
        tuple(sorted(details.merged.items())),
        tuple(IndexCatchupPlan(name, tuple(index_lag(details, name).items())) for name in wanted),
        rule.missing,
        tuple(rule.list_added),
    )


def _update(
    table: MemWalTable, names: list[str], *, retrain: bool
) -> tuple[lance.LanceDataset, IndexDetails]:
    """Run Lance's index update on `names`: the dataset at the version it committed, and its details."""
    dataset = table.dataset()
    dataset.optimize.optimize_indices(index_names=names, retrain=retrain)  # moves `dataset` to its commit
    return dataset, table.index_details(dataset.version)


def _caught_up(details: IndexDetails, index: str, merged: dict[str, int]) -> bool:
    """Whether `index` covers at least the progress `merged` the update started from."""
    caught_up = details.index_catchup.get(index, {})
    return all(caught_up.get(region, 0) >= generation for region, generation in merged.items())


def _bring_level(
    table: MemWalTable, plan: CatchupPlan, *, rebuild: bool, started: float
) -> tuple[lance.LanceDataset | None, int, list[IndexCatchupResult]]:
    """Update the plan's lagging indexes: the dataset at the update's commit (None if none lagged),
    the table version after it, and what each lagging index got."""
    behind = [p for p in plan.indexes if p.behind]
    if not behind:
        return None, plan.table_version, []
    merged = dict(plan.merged)
    names = [p.index for p in behind]
    dataset, details = _update(table, names, retrain=rebuild)
    method = dict.fromkeys(names, "rebuild" if rebuild else "optimize")
    still = [name for name in names if not _caught_up(details, name, merged)]
    if still and not rebuild:
        dataset, details = _update(table, still, retrain=True)
        method.update(dict.fromkeys(still, "rebuild"))
    failed = [name for name in names if not _caught_up(details, name, merged)]
    if failed:
        raise CatchupError(
            f"table {table.uri}: index {failed[0]!r} did not catch up to merge progress of version "
            f"{plan.table_version} after an update and a rebuild (lag now "
            f"{index_lag(details, failed[0])})"
        )
    elapsed = time.perf_counter() - started
    return (
        dataset,
        details.table_version,
        [
            IndexCatchupResult(p.index, method[p.index], dict(p.lag), index_lag(details, p.index), elapsed)
            for p in behind
        ],
    )


@checked
@recorded(CATCHUP)
def catchup(
    table: MemWalTable,
    *,
    indexes: Iterable[str] | None = None,
    rebuild: bool = False,
    dry_run: bool = False,
) -> CatchupResult:
    """Bring every maintained index (or the named ones) level with merge progress.

    `rebuild` retrains the lagging indexes from the data instead of adding
    the merged fragments to them (better recall after a shift in the data).
    `dry_run` only measures the lag (and what the list would gain or lose
    as things stand). Then the details' `maintained_indexes` list is brought
    in step with the rule, under the details lease (so never call this
    holding that lease): after the update, so that a new index covers the
    merged generations before it is listed.

    Raises CatchupError if an index is still behind the progress read before
    the update after both an incremental update and a rebuild.

    Example:
        >>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
        ...     print(catchup(table).to_json()["indexes"])
    """
    started = time.perf_counter()
    table.store.stats.reset()
    plan = plan_catchup(table, indexes=indexes)
    if dry_run:
        return CatchupResult(
            table=table.uri,
            read_version=plan.table_version,
            dry_run=True,
            seconds=time.perf_counter() - started,
            indexes=[],
            plan=plan,
            maintained_list=update_maintained_list(table, dry_run=True),
            requests=table.store.stats.snapshot(),
        )
    # A list gaining an index needs every region's manifest: they are read while Lance updates the indexes.
    details = table.index_details(plan.table_version)
    with side_call(lambda: read_region_manifests(table, details) if plan.list_added else None) as regions:
        dataset, version, results = _bring_level(table, plan, rebuild=rebuild, started=started)
    manifests = regions.result()
    results += [
        IndexCatchupResult(p.index, "none", dict(p.lag), dict(p.lag), 0.0)
        for p in plan.indexes
        if not p.behind
    ]
    listing = update_maintained_list(table, dataset=dataset, regions=manifests)
    after = max(version, listing.table_version or version)
    return CatchupResult(
        table=table.uri,
        read_version=plan.table_version,
        new_version=after if after > plan.table_version else None,
        seconds=time.perf_counter() - started,
        indexes=sorted(results, key=lambda r: r.index),
        plan=plan,
        maintained_list=listing,
        requests=table.store.stats.snapshot(),
    )
