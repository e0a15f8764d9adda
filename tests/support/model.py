"""Write through Lance's native MemWAL writer while keeping a plain Python model of the rows."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

from tests.support.schema import key_field

Key = tuple[Any, ...]


class ModelTable:
    """A MemWAL table and the rows it must hold once every write is merged."""

    def __init__(
        self,
        uri: str | Path,
        schema: pa.Schema,
        primary_key: Sequence[str],
        base_rows: Sequence[Mapping[str, Any]] = (),
        storage_options: Mapping[str, str] | None = None,
        *,
        btree_indexes: Sequence[str] = (),
        maintained_indexes: Sequence[str] | None = None,
    ) -> None:
        """`btree_indexes`: columns given a BTREE index `{column}_idx` before MemWAL is enabled;
        `maintained_indexes`: the list Lance records (None: Lance's default, every index)."""
        self.uri = str(uri)
        self.schema = schema
        self.primary_key = list(primary_key)
        self.options = dict(storage_options or {}) or None
        self.rows: dict[Key, dict[str, Any]] = {}
        table = pa.Table.from_pylist([dict(r) for r in base_rows], schema=schema)
        dataset = lance.write_dataset(table, self.uri, storage_options=self.options)
        for column in btree_indexes:
            dataset.create_scalar_index(column, "BTREE", name=f"{column}_idx")
        self.dataset().initialize_mem_wal(maintained_indexes=maintained_indexes)
        for row in base_rows:
            self.rows[self.key(row)] = dict(row)

    def key(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[c] for c in self.primary_key)

    def dataset(self) -> lance.LanceDataset:
        return lance.dataset(self.uri, storage_options=self.options)

    def write(
        self,
        region: str | None,
        ops: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        *,
        memtable_rows: int = 50,
    ) -> str:
        """Apply `ops` ("put", rows) / ("delete", keys-as-rows) through one writer session of `region`."""
        region = region or str(uuid.uuid4())
        key_schema = pa.schema([self.schema.field(c) for c in self.primary_key])
        # Non-durable puts do not wait for the WAL flush; close() still flushes everything.
        with self.dataset().mem_wal_writer(
            region, max_memtable_rows=memtable_rows, durable_write=False
        ) as writer:
            for kind, all_rows in ops:
                # Lance never splits one write across MemTables, so keep writes within the cap.
                for start in range(0, len(all_rows), memtable_rows):
                    rows = all_rows[start : start + memtable_rows]
                    if kind == "put":
                        writer.put(pa.Table.from_pylist([dict(r) for r in rows], schema=self.schema))
                        for row in rows:
                            self.rows[self.key(row)] = dict(row)
                    else:
                        keys = [{c: r[c] for c in self.primary_key} for r in rows]
                        writer.delete(pa.Table.from_pylist(keys, schema=key_schema))
                        for row in rows:
                            self.rows.pop(self.key(row), None)
        return region

    def actual(self) -> dict[Key, dict[str, Any]]:
        """The base table's rows, keyed like the model."""
        rows = self.dataset().to_table().to_pylist()
        keyed = {self.key(r): r for r in rows}
        assert len(keyed) == len(rows), "the base table holds a key twice"
        return keyed

    def assert_merged(self) -> None:
        actual = self.actual()
        missing = self.rows.keys() - actual.keys()
        extra = actual.keys() - self.rows.keys()
        assert not missing and not extra, f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"
        wrong = [k for k in self.rows if actual[k] != self.rows[k]]
        assert not wrong, (
            f"{len(wrong)} rows differ, e.g. {wrong[0]}: {actual[wrong[0]]} != {self.rows[wrong[0]]}"
        )


KEYED_SCHEMA = pa.schema(
    [
        key_field("id", pa.int64()),
        pa.field("v", pa.string()),
    ]
)


def keyed_backlog_table(path: str | Path, regions: int = 2, rounds: int = 2) -> tuple[ModelTable, list[str]]:
    """A 40-row table with `rounds` generations pending in each of `regions` regions.

    Region r owns keys r*1000..r*1000+7 (region 0's overlap base rows) and base
    key 20+r, which it deletes: no key is written by two regions, since the
    order in which regions merge is not defined.
    """
    table = ModelTable(path, KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(40)])
    ids = []
    for r in range(regions):
        region = str(uuid.uuid4())
        ids.append(region)
        for g in range(rounds):
            keys = range(r * 1000, r * 1000 + 8)
            table.write(
                region,
                [("put", [{"id": k, "v": f"r{r}g{g}"} for k in keys]), ("delete", [{"id": 20 + r}])],
                memtable_rows=50,
            )
    return table, ids
