"""The merge commit of a batch: its rows, its deletes and every region's progress.

Two forms, chosen per commit (`choose_commit`):

- `single`: upserts, deletes (a `when_not_matched_by_source_delete` predicate)
  and the merge markers of every region in ONE `merge_insert`. Race-safe by
  construction, but the delete clause makes Lance scan every base row: its cost
  grows with the base table (0.2 s at 4M rows, 2.4 s at 64M).
- `two-step`: first a delete-only `merge_insert` (`when_matched_delete`, through
  the key index when there is one), then the marked upsert with no delete
  clause. The delete carries no marker, so it is fenced otherwise: the caller
  verifies, under the index-details lease, that every region's recorded
  progress at the version the delete is built on is what it planned from, and
  the delete joins against that version only, with Lance's own retries off
  (`conflict_retries(0)`): it can only remove rows that existed then, never a
  key another merger re-inserted later; a conflict fails it, and the caller
  re-checks progress before trying again. Between the two commits progress is
  unchanged, so MemWAL-aware readers still add every pending generation, whose
  tombstones and puts cover the deletes already applied.

The markers make Lance reject a stale merge: a "Stale SSTable compaction" error
means another merger got a region there first, which the caller answers by
re-planning, never by retrying.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal_core.errors import BadInputError, DeleteConflictError, StaleMergeError, first_line
from memwal_core.lance_errors import is_commit_conflict, is_stale_merge
from memwal_core.model.lance_filter import literal, one_of, quoted
from memwal_core.services.defaults import AUTO, COMMIT_FORMS, SINGLE, TWO_STEP
from memwal_core.services.merge.collapse import REGION_COLUMN

if TYPE_CHECKING:
    import lance

    from memwal_core.model.table import MemWalTable

log = logging.getLogger(__name__)

# A join uses the key index while its source has at most one row per this many base rows
# (bench/merge_index.py): an upsert-only commit's index wins below ~1/8,000 at 1M, 4M and 16M rows,
# a delete-only commit's below ~1/10,000 to 1/14,000 from 1M to 64M rows (its lookups cost per key).
INDEX_SOURCE_RATIO = 10_000
# The index path never takes more upsert rows than this: it holds them in Lance's 300 MB join pool
# (512,000 rows failed with "Resources exhausted"). After a fenced delete a key scan must apply
# the new deletion vectors (4x slower at 16M rows), so the index wins up to about 30,000 rows at
# 4M and 16M base rows: then it is used up to this cap, at most one row per AFTER_DELETE_RATIO.
INDEX_MAX_UPSERT_ROWS = 25_000
AFTER_DELETE_RATIO = 100
# A delete-only join through the index holds just the keys: measured fine at 100,000 (at 4M rows).
INDEX_MAX_DELETE_ROWS = 100_000


def delete_predicate(keys: pa.Table, primary_key: Sequence[str]) -> str:
    """A predicate selecting exactly the rows whose key is in `keys`.

    For a composite key, rows are grouped by all key columns but the one with
    the most distinct values, which goes into an IN list:
    `(a = 1 AND b IN (...)) OR ...`. Measured 4x faster to plan and run than
    one `(a = .. AND b = ..)` term per key at 40,000 keys.
    """
    if len(primary_key) == 1:
        return one_of(primary_key[0], keys.column(primary_key[0]).to_pylist())
    columns = {c: keys.column(c).to_pylist() for c in primary_key}
    widest = max(primary_key, key=lambda c: len(set(columns[c])))
    others = [c for c in primary_key if c != widest]
    groups: dict[tuple[object, ...], list[object]] = {}
    for i, value in enumerate(columns[widest]):
        groups.setdefault(tuple(columns[c][i] for c in others), []).append(value)
    terms = []
    for prefix, values in sorted(groups.items()):
        equalities = [f"{quoted(c)} = {literal(v, c)}" for c, v in zip(others, prefix, strict=True)]
        terms.append("(" + " AND ".join([*equalities, one_of(widest, values)]) + ")")
    return " OR ".join(terms)


def base_rows_matching(
    dataset: lance.LanceDataset, primary_key: Sequence[str], labelled: pa.Table, regions: Sequence[str]
) -> dict[str, int]:
    """How many rows of `dataset`, at its version, each of `regions` deletes: the rows its keys match.

    Lance counts deleted rows per commit only. One read of the key columns
    filtered by every region's keys (`labelled`: the key columns and the region
    of each, REGION_COLUMN; through the key index when there is one) splits that
    count: regions never share a key, so each match is one region's.
    """
    keys = labelled.select(list(primary_key))
    found = dataset.to_table(columns=list(primary_key), filter=delete_predicate(keys, primary_key))
    typed = pa.table(
        {
            **{c: keys.column(c).cast(found.schema.field(c).type) for c in primary_key},
            REGION_COLUMN: labelled.column(REGION_COLUMN),
        }
    )
    matched = Counter(
        found.join(typed, keys=list(primary_key), join_type="inner").column(REGION_COLUMN).to_pylist()
    )
    return {r: matched[r] for r in regions}


@dataclass(frozen=True)
class CommitPlan:
    """How one batch is committed, and why."""

    form: str
    delete_index: bool
    upsert_index: bool
    reason: str


def check_commit_form(form: str) -> None:
    """Refuse an unknown commit form before anything is read."""
    if form not in COMMIT_FORMS:
        raise BadInputError(f"unknown commit form {form!r} (use {', '.join(COMMIT_FORMS)})")


def choose_commit(
    live_rows: int, deleted_rows: int, base_rows: int, has_key_index: bool, *, form: str = AUTO
) -> CommitPlan:
    """The commit form and index use for a batch (`form` forces `single` or `two-step`).

    Measured (bench/merge_scale.py, BTree on the key, 3,000 upserts and 200
    deletes): the single form's delete clause scans every base row (0.17 s at
    4M rows, 2.6 s at 64M); the indexed delete-only join costs 0.03 s at any of
    those sizes. The key index serves a delete or an upsert while its source is
    tiny next to the base (bench/merge_index.py: an indexed delete costs per
    key, 5x the scan for 6,400 keys at 4M rows), and, after a delete, an upsert
    of up to ~25,000 rows.
    """
    check_commit_form(form)
    if not deleted_rows and form != TWO_STEP:
        upsert_index = (
            has_key_index
            and live_rows <= INDEX_MAX_UPSERT_ROWS
            and live_rows * INDEX_SOURCE_RATIO <= base_rows
        )
        return CommitPlan(SINGLE, False, upsert_index, f"no deletes: one marked upsert, {_how(upsert_index)}")
    if form == SINGLE:
        return CommitPlan(SINGLE, False, False, "single form: the delete clause scans every base row")
    upsert_index = (
        has_key_index and live_rows <= INDEX_MAX_UPSERT_ROWS and live_rows * AFTER_DELETE_RATIO <= base_rows
    )
    delete_index = (
        has_key_index
        and deleted_rows <= INDEX_MAX_DELETE_ROWS
        and deleted_rows * INDEX_SOURCE_RATIO <= base_rows
    )
    return CommitPlan(
        TWO_STEP,
        delete_index,
        upsert_index,
        f"{deleted_rows} deletes: a fenced delete-only commit {_how(delete_index)}, then the marked upsert "
        f"{_how(upsert_index)} (a delete clause would scan all {base_rows} base rows)",
    )


def _how(index: bool) -> str:
    return "through the key index" if index else "scanning the keys"


def delete_fenced(
    dataset: lance.LanceDataset, primary_key: Sequence[str], deleted_keys: pa.Table, *, use_index: bool
) -> int:
    """Delete the rows of `deleted_keys` as they are at the dataset's version; how many were deleted.

    Lance's retries are off: a retry would join against a newer version, where
    the key may belong to another merger's later generation. A conflict raises
    DeleteConflictError, and the caller re-checks progress before trying again.
    """
    builder = dataset.merge_insert(_on(primary_key)).when_matched_delete().use_index(use_index)
    try:
        stats: dict[str, int] = builder.conflict_retries(0).execute(deleted_keys)
    except OSError as exc:
        if is_commit_conflict(exc):
            raise DeleteConflictError(
                f"the delete commit met a concurrent commit: {first_line(exc)}"
            ) from exc
        raise
    return stats.get("num_deleted_rows", 0)


def _on(primary_key: Sequence[str]) -> str | list[str]:
    return list(primary_key) if len(primary_key) > 1 else primary_key[0]


def commit_batch(
    dataset: lance.LanceDataset,
    primary_key: Sequence[str],
    targets: Mapping[str, int],
    live: pa.Table,
    deleted_keys: pa.Table,
    *,
    plan: CommitPlan,
) -> dict[str, int]:
    """Upsert `live`, delete `deleted_keys` and mark each region's target generation merged.

    Both are in-memory tables, never streams: Lance's join builds its hash
    table on the side whose size it knows to be smaller, and a stream's size is
    unknown, so it then builds on every key of the base table (78 MB at 2.2M
    base rows, 650 MB at 10M), and a round's peak grew with each batch it had
    already merged. A table bounds the build by the batch's budget.

    Returns Lance's merge statistics. Raises StaleMergeError if any region's
    recorded progress is already at or past its target (nothing is marked then).
    """
    from lance.mem_wal import CompactedSsTable

    deleted = 0
    if plan.form == TWO_STEP and deleted_keys.num_rows:
        deleted = delete_fenced(dataset, primary_key, deleted_keys, use_index=plan.delete_index)
    builder = dataset.merge_insert(_on(primary_key)).when_matched_update_all().when_not_matched_insert_all()
    if plan.form == SINGLE and deleted_keys.num_rows:
        builder = builder.when_not_matched_by_source_delete(delete_predicate(deleted_keys, primary_key))
    markers = [CompactedSsTable(region, generation) for region, generation in sorted(targets.items())]
    builder = builder.use_index(plan.upsert_index).mark_sstables_as_compacted(markers)
    try:
        stats: dict[str, int] = builder.execute(live)
    except OSError as exc:
        if is_stale_merge(exc):
            raise StaleMergeError(
                f"{len(targets)} region(s): a region was already merged past its target by another merger"
            ) from exc
        raise
    return {**stats, "num_deleted_rows": stats.get("num_deleted_rows", 0) + deleted}


def commit_region(
    dataset: lance.LanceDataset,
    primary_key: Sequence[str],
    region: str,
    generation: int,
    live: pa.Table,
    deleted_keys: pa.Table,
    *,
    use_index: bool,
) -> dict[str, int]:
    """One region's commit in the single form: a batch of one."""
    plan = CommitPlan(SINGLE, False, use_index and not deleted_keys.num_rows, "one region")
    return commit_batch(dataset, primary_key, {region: generation}, live, deleted_keys, plan=plan)


def moved_regions(table: MemWalTable, regions: Collection[str], read_version: int, version: int) -> set[str]:
    """Which of `regions` had their progress moved by a version strictly between our read and our commit.

    Lance rebases a merge commit over a non-overlapping one without re-running
    its join, so a delete predicate never sees keys a concurrent merger of the
    same region inserted in between. A region listed here must have its
    deletes re-applied. One manifest read per intervening version, whatever
    the number of regions.
    """
    if version <= read_version + 1:
        return set()
    before = table.index_details(read_version).merged
    moved: set[str] = set()
    for between in range(read_version + 1, version):
        merged = table.index_details(between).merged
        moved.update(r for r in regions if merged.get(r, 0) != before.get(r, 0))
    return moved


def commit_checked(
    table: MemWalTable,
    dataset: lance.LanceDataset,
    primary_key: Sequence[str],
    targets: Mapping[str, int],
    live: pa.Table,
    deleted_keys: Callable[[Set[str]], pa.Table],
    *,
    plan: CommitPlan,
) -> tuple[dict[str, int], int]:
    """`commit_batch` on `dataset` as read, then re-apply the deletes of any region merged in between.

    Leases rule a same-region commit in between out while they are honoured;
    this is the backstop for an expired lease or a merger that ignores them.
    `deleted_keys(regions)` gives those regions' deleted keys. Returns Lance's
    statistics and the table version that holds the merge.
    """
    read_version = int(dataset.version)
    stats = commit_batch(dataset, primary_key, targets, live, deleted_keys(set(targets)), plan=plan)
    version = int(dataset.version)
    moved = moved_regions(table, targets, read_version, version)
    if moved:
        log.warning(
            "regions %s: merged concurrently by another merger in versions %d..%d; re-applying deletes",
            sorted(moved),
            read_version + 1,
            version - 1,
        )
        repaired = reapply_deletes(dataset, primary_key, deleted_keys(moved))
        stats = {**stats, "num_deleted_rows": stats.get("num_deleted_rows", 0) + repaired}
        version = int(dataset.version)
    return stats, version


def reapply_deletes(dataset: lance.LanceDataset, primary_key: Sequence[str], deleted_keys: pa.Table) -> int:
    """Delete `deleted_keys` again (only safe while holding the region's merge lease)."""
    if not deleted_keys.num_rows:
        return 0
    before = dataset.count_rows()
    dataset.delete(delete_predicate(deleted_keys, primary_key))
    return before - dataset.count_rows()
