"""Keeping the details' `maintained_indexes` list in step with `maintain_all_indexes`.

Lance 13 (inside LanceDB 0.40) reads only the list: on a table whose list
is empty its vector search refuses to run ("the MemWAL LSM scanner requires
the vector index ... to be maintained by the write spec"). Lance 14 reads
the flag as "every index, including ones created later". So with the flag
set, memwal writes the list the rule of `model.indexes` wants (every user
index of a type Lance's MemTables hold): `memwal init` right after enabling
MemWAL, `memwal catchup` and the Dagster catch-up job for indexes created or
dropped since. Without the flag the list is the user's choice and stays.

The rewrite replaces the MemWAL index, so it goes through `commit_details`
under the details lease, like a snapshot build: serialised with every merge
commit, verified afterwards, lost progress restored.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from memwal_core.format.index_details import IndexDetails
from memwal_core.model.details_lease import DEFAULT_DETAILS_LEASE_TTL, details_lease
from memwal_core.model.indexes import MaintainedIndexes, read_maintained
from memwal_core.services.snapshot.details_commit import ProgressRepair, commit_details
from memwal_core.table import MemWalTable


@dataclass(frozen=True)
class ListUpdate:
    """Names added to and removed from the list; `table_version` None when nothing was committed."""

    added: list[str]
    removed: list[str]
    table_version: int | None = None
    repairs: list[ProgressRepair] = dataclasses.field(default_factory=list)

    @classmethod
    def planned(cls, rule: MaintainedIndexes) -> ListUpdate:
        return cls(rule.list_added, rule.list_removed)

    def to_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "removed": self.removed,
            "table_version": self.table_version,
            "progress_repairs": [dataclasses.asdict(r) for r in self.repairs],
        }

    def to_text(self) -> str | None:
        if not self.added and not self.removed:
            return None
        change = " ".join([*(f"+{n}" for n in self.added), *(f"-{n}" for n in self.removed)])
        where = "(dry run)" if self.table_version is None else f"at table v{self.table_version}"
        return f"  maintained_indexes list {change} {where}"


def _read(table: MemWalTable) -> tuple[Any, IndexDetails, MaintainedIndexes]:
    """The latest dataset, its details and the rule's answer, all at one version."""
    dataset = table.dataset()
    details = table.index_details(dataset.version)
    return dataset, details, read_maintained(table, details, dataset)


def update_maintained_list(
    table: MemWalTable,
    *,
    dry_run: bool = False,
    lease_ttl: float = DEFAULT_DETAILS_LEASE_TTL,
    lease_wait: float | None = None,
) -> ListUpdate:
    """Rewrite the list when the rule finds it outdated (checked first without the lease)."""
    _dataset, _details, rule = _read(table)
    if dry_run or not rule.list_outdated:
        return ListUpdate.planned(rule)
    with details_lease(table.store, ttl=lease_ttl, wait=lease_wait) as lease:
        dataset, details, rule = _read(table)
        if not rule.list_outdated:
            return ListUpdate.planned(rule)
        message = details.to_proto()
        del message.maintained_indexes[:]
        message.maintained_indexes.extend(rule.wanted_list)
        commit = commit_details(table, lease, dataset, message, str(uuid.uuid4()))
    return ListUpdate(rule.list_added, rule.list_removed, commit.table_version, commit.repairs)
