"""Which base-table indexes the MemWAL maintains: the one rule catch-up, GC, reads and Dagster ask.

Lance 14 records two things in the MemWAL index details: `maintained_indexes`
(a list of names) and `maintain_all_indexes` (field 12, which Lance 13 and
so LanceDB 0.40 do not know). Lance 14 reads the flag as "every index on the
table, including ones created later"; Lance 13 reads only the list, and its
vector search refuses an index the list does not name. So:

- Maintained (caught up by `memwal catchup`, waited for by GC, usable by an
  indexed read): with the flag, every user index on the table; without it,
  the listed indexes the table still has. A listed index that was dropped is
  reported missing and constrains nothing.
- The list the details should carry: with the flag, every user index whose
  type Lance's MemTables can hold (a list naming any other type makes Lance's
  writer refuse to open the region), so readers that know only the list see
  the same indexes; without the flag the list is the user's choice and is
  left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwal_core.format.index_details import IndexDetails
from memwal_core.format.naming import FRAG_REUSE_INDEX_NAME, MEM_WAL_INDEX_NAME

if TYPE_CHECKING:
    from memwal_core.model.table import MemWalTable

# Lance's system indexes (`is_system_index`): never user indexes, never maintained.
SYSTEM_INDEXES = frozenset({MEM_WAL_INDEX_NAME, FRAG_REUSE_INDEX_NAME})
# Index detail types Lance 14's MemWAL writer keeps in its MemTables; it refuses a list naming another.
MEMTABLE_INDEX_TYPES = frozenset({"BTreeIndexDetails", "VectorIndexDetails", "InvertedIndexDetails"})


@dataclass(frozen=True)
class TableIndex:
    """One index on the base table: its name and the type URL of its details."""

    name: str
    type_url: str

    @property
    def user(self) -> bool:
        return self.name not in SYSTEM_INDEXES

    @property
    def memtable_type(self) -> bool:
        """Whether Lance's MemWAL writer can keep this index for the rows it holds."""
        return self.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1] in MEMTABLE_INDEX_TYPES


@dataclass(frozen=True)
class MaintainedIndexes:
    """The answer of the rule at one table version."""

    # Kept caught up with merged data, sorted.
    names: tuple[str, ...]
    # Listed in the details but no longer on the table, sorted.
    missing: tuple[str, ...]
    # What the details list now, and what they should list (see the module doc).
    listed: tuple[str, ...]
    wanted_list: tuple[str, ...]

    @property
    def list_outdated(self) -> bool:
        return self.listed != self.wanted_list

    @property
    def list_added(self) -> list[str]:
        return sorted(set(self.wanted_list) - set(self.listed))

    @property
    def list_removed(self) -> list[str]:
        return sorted(set(self.listed) - set(self.wanted_list))


def maintained_indexes(details: IndexDetails, indexes: Iterable[TableIndex]) -> MaintainedIndexes:
    """Apply the rule to the details and the indexes of the same table version."""
    user = sorted((i for i in indexes if i.user), key=lambda i: i.name)
    existing = {i.name for i in user}
    listed = tuple(details.maintained_indexes)
    if details.maintain_all_indexes:
        names = tuple(sorted(existing))
        wanted = tuple(i.name for i in user if i.memtable_type)
    else:
        names = tuple(sorted(set(listed) & existing))
        wanted = listed
    return MaintainedIndexes(names, tuple(sorted(set(listed) - existing)), listed, wanted)


def table_indexes(dataset: Any) -> list[TableIndex]:
    """Every index of a Lance dataset (a `lance.LanceDataset`), system ones included."""
    return [TableIndex(d.name, d.type_url) for d in dataset.describe_indices()]


def read_maintained(table: MemWalTable, details: IndexDetails, dataset: Any = None) -> MaintainedIndexes:
    """The rule at `details.table_version`; `dataset` (that version, already open) saves an open."""
    if dataset is None or dataset.version != details.table_version:
        dataset = table.dataset(details.table_version)
    return maintained_indexes(details, table_indexes(dataset))
