"""Batches of a merge round: which region prefixes go into one commit, within a memory budget.

Every safe merge commit scans the base table's keys once, whatever its size,
so a round merges as many regions per commit as its budget allows: one commit
for many regions instead of one per region. The budget bounds what a batch
collapses in memory (rows and bytes of the generations read), so a backlog of
any size is merged as several prefixes, each its own commit, and memory
never grows with the backlog. A region appears at most once in a batch (one
generation marked per region per commit), and its later prefixes go into
later batches, so each region still merges strictly in ascending order.

Pure: no I/O, so the rules are unit-tested on their own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from memwal_core.arguments import Count, check_fields, checked
from memwal_core.services.merge.plan import RegionMergePlan

# A batch may collapse this share of the machine's memory. Reading, collapsing,
# splitting and Lance's commit each hold copies of the batch: measured peak about
# 7.5x the byte budget above the process's floor (tests/integration/test_merge_rounds.py).
MEMORY_SHARE = 16
# Rows per batch by default: the byte budget at this many bytes per row (narrow
# key-value rows are ~20-50 bytes in Arrow; a row count keeps per-row overheads bounded too).
BYTES_PER_ROW_ASSUMED = 256
FALLBACK_MEMORY = 8 << 30


def machine_memory() -> int:
    """Physical memory in bytes (a fixed 8 GiB where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return FALLBACK_MEMORY


@dataclass(frozen=True)
class MergeBudget:
    """At most this much of the generations' rows and bytes collapsed per batch (one commit)."""

    max_rows: Count
    max_bytes: Count

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    @checked
    def default(cls, *, max_rows: Count | None = None, max_bytes: Count | None = None) -> MergeBudget:
        """A sixteenth of the machine's memory, and rows at 256 bytes each; either may be given instead."""
        budget_bytes = max_bytes if max_bytes is not None else machine_memory() // MEMORY_SHARE
        budget_rows = max_rows if max_rows is not None else max(1, budget_bytes // BYTES_PER_ROW_ASSUMED)
        return cls(budget_rows, budget_bytes)


def _fitting_prefix(plan: RegionMergePlan, rows_left: int, bytes_left: int) -> int:
    """How many of `plan`'s first generations fit in what is left of the budget."""
    count = rows = size = 0
    for source in plan.generations:
        rows += source.rows or 0
        size += source.bytes or 0
        if rows > rows_left or size > bytes_left:
            break
        count += 1
    return count


def next_batch(
    pending: Sequence[RegionMergePlan], budget: MergeBudget
) -> tuple[list[RegionMergePlan], list[RegionMergePlan]]:
    """The next batch (a prefix of some regions' plans) and what stays pending after it.

    Regions are taken in the order given, each with the longest prefix that
    still fits. A first generation larger than the whole budget is merged on
    its own, in a batch of its own: a generation cannot be split, and this
    bounds memory by the largest generation a writer flushed, never by the
    backlog.
    """
    batch: list[RegionMergePlan] = []
    rest: list[RegionMergePlan] = []
    rows_left, bytes_left = budget.max_rows, budget.max_bytes
    for index, plan in enumerate(pending):
        count = _fitting_prefix(plan, rows_left, bytes_left)
        oversized = count == 0 and not batch
        taken = plan.prefix(1 if oversized else count) if oversized or count else None
        if taken is None:
            rest.append(plan)
            continue
        batch.append(taken)
        remainder = plan.after(taken.target_generation)
        rest.extend([remainder] if remainder is not None else [])
        if oversized:
            rest.extend(pending[index + 1 :])
            break
        rows_left -= taken.rows
        bytes_left -= taken.bytes
    return batch, rest
