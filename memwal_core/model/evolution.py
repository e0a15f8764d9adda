"""A generation's rows, written under the schema of its day, read as the table's columns today.

Lance knows a column by its field id, not its name: a renamed column keeps
its id, an added column takes a new one, a dropped column's id is gone.
A MemWAL table takes those three changes while writers and pending
generations live on (Lance refuses the others: a type change, a computed or
non-nullable column, a renamed key), and its LSM read matches a generation's
columns to the table's by id, filling an added column with nulls. Every
service that reads a generation's rows does the same through `TableFields`,
so a merge writes what the MemWAL-aware read shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memwal_core.errors import SchemaError, first_line

# A generation's delete marker: not a table column, kept as written.
TOMBSTONE = "_tombstone"


def _field_ids(dataset: Any) -> dict[str, int]:
    """A Lance dataset's top-level column names and their field ids."""
    return {field.name(): field.id() for field in dataset.lance_schema.fields()}


@dataclass(frozen=True)
class TableFields:
    """The table's columns as Lance identifies them: its Arrow schema and each column's field id."""

    schema: pa.Schema
    ids: tuple[int, ...]

    @classmethod
    def of(cls, dataset: Any) -> TableFields:
        """The columns of a Lance dataset (the base table at the version a service reads)."""
        ids = _field_ids(dataset)
        schema: pa.Schema = dataset.schema
        return cls(schema, tuple(ids[name] for name in schema.names))

    def select(self, columns: Sequence[str]) -> TableFields:
        """These columns only, in this order."""
        ids = dict(zip(self.schema.names, self.ids, strict=True))
        return TableFields(pa.schema([self.schema.field(c) for c in columns]), tuple(ids[c] for c in columns))

    def read(
        self,
        generation: Any,
        *,
        columns: Sequence[str] | None = None,
        where: str | None = None,
        what: str,
    ) -> pa.Table:
        """`generation`'s rows (a Lance dataset) as this table's `columns` (all of them by default) and
        the tombstone: each column found by field id, renamed, an added one filled with nulls, a
        dropped one left out. `where` filters by key columns, which keep their names (Lance refuses
        to rename a key). SchemaError names the column and `what` when a column cannot be read so."""
        # The tombstone's field id is a generation's own: a column added to the table later may take
        # the same number, so the tombstone is found by name and never matched by id.
        written = {fid: name for name, fid in _field_ids(generation).items() if name != TOMBSTONE}
        wanted = list(columns) if columns is not None else [*self.schema.names, TOMBSTONE]
        ids = dict(zip(self.schema.names, self.ids, strict=True))
        names = set(generation.schema.names)
        sources = {c: written.get(ids[c]) if c in ids else c if c in names else None for c in wanted}
        stored = [name for name in sources.values() if name is not None]
        rows = generation.to_table(columns=stored, filter=where)
        out = []
        for column in wanted:
            source = sources[column]
            if column not in ids:  # not a table column (the tombstone): as written, if it was
                if source is not None:
                    out.append((column, rows.column(source)))
                continue
            field = self.schema.field(column)
            if source is None:
                if not field.nullable:
                    raise SchemaError(
                        f"{what}: column {column} was added after it was written and may hold no nulls"
                    )
                out.append((column, pa.nulls(rows.num_rows, field.type)))
                continue
            data = rows.column(source)
            if data.type != field.type:
                try:
                    data = data.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"{what}: column {column} was written as {data.type}, which does not read as the "
                        f"table's {field.type} ({first_line(exc)})"
                    ) from None
            out.append((column, data))
        return pa.table(dict(out)) if out else pa.table({})
