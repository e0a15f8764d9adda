"""`init`: enable MemWAL on an existing Lance table.

Lance requires the primary key columns to be non-nullable and marked with the
unenforced-primary-key metadata; `initialize_mem_wal` then writes the MemWAL
index. Every check runs before the first change, so a refused init leaves the
table as it was.

Lance records `maintain_all_indexes` with an empty `maintained_indexes` list,
which only Lance 14 understands; so init then lists the table's indexes
explicitly (`services.index_list`), keeping the flag, and LanceDB's vector
search works on the table from the start.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import pyarrow as pa

from memwal_core.arguments import Range, check_fields, checked
from memwal_core.errors import BadInputError, MemwalError, MemWalNotEnabledError, SchemaError
from memwal_core.format.primary_key import PK_META, PK_POSITION_META
from memwal_core.model.table import MemWalTable, primary_key_of
from memwal_core.services.index_list import update_maintained_list
from memwal_core.services.result import ServiceResult


def hashable_key_type(kind: pa.DataType) -> bool:
    """Whether Lance 14 can hash a primary key of this type (its refusal would come after our changes)."""
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


@dataclass(frozen=True)
class RegionSpecChoice:
    """How writes are routed to regions: at most one of the three modes, or manual."""

    bucket_column: str | None = None
    num_buckets: Annotated[int, Range(1, 2**31 - 1)] | None = None
    identity_column: str | None = None
    unsharded: bool = False

    def __post_init__(self) -> None:
        check_fields(self)

    def validate(self) -> None:
        modes = sum([self.bucket_column is not None, self.identity_column is not None, self.unsharded])
        if modes > 1:
            raise BadInputError("choose one region spec: --bucket, --identity or --unsharded")
        if (self.bucket_column is None) != (self.num_buckets is None):
            raise BadInputError("--bucket and --num-buckets go together")
        if self.num_buckets is not None and self.num_buckets < 1:
            raise BadInputError(f"--num-buckets must be at least 1, not {self.num_buckets}")

    def columns(self) -> list[str]:
        return [c for c in (self.bucket_column, self.identity_column) if c is not None]


@dataclass(frozen=True)
class InitResult(ServiceResult):
    """MemWAL as `init` left it: `new_version` is the table with its MemWAL index (and list)."""

    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {"version": "new_version"}

    primary_key: list[str]
    region_spec: dict[str, Any]
    maintained_indexes: list[str]


@checked
def initialize(table: MemWalTable, primary_key: list[str], spec: RegionSpecChoice) -> InitResult:
    """Mark `primary_key` on the schema if needed, then initialise MemWAL."""
    started = time.perf_counter()
    spec.validate()
    if not primary_key:
        raise BadInputError("--primary-key names no column")
    dataset = table.dataset()
    read_version = dataset.version
    try:
        table.index_details(dataset.version)
    except MemWalNotEnabledError:
        pass
    else:
        raise BadInputError(f"table {table.uri} already has MemWAL enabled")
    schema = dataset.schema
    for column in [*primary_key, *spec.columns()]:
        if column not in schema.names:
            raise SchemaError(f"table {table.uri} has no column {column!r}")
    for column in primary_key:
        if not hashable_key_type(schema.field(column).type):
            raise SchemaError(
                f"primary key column {column!r} of {table.uri} has type {schema.field(column).type}, which "
                "Lance's MemWAL cannot hash (integers, booleans, strings and binary only)"
            )
    for column in spec.columns():
        kind = schema.field(column).type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise SchemaError(
                f"region column {column!r} of {table.uri} has type {kind}: Lance 14 routes by integers, "
                "booleans and strings only; a binary key takes one region (--unsharded)"
            )
    existing = primary_key_of(schema)
    if existing and existing != primary_key:
        raise SchemaError(f"table {table.uri} already has primary key {existing}, not {primary_key}")
    for column in primary_key:
        if schema.field(column).nullable and dataset.count_rows(filter=f"`{column}` IS NULL") > 0:
            raise SchemaError(f"primary key column {column!r} of {table.uri} holds null values")

    nullable = [c for c in primary_key if schema.field(c).nullable]
    if nullable:
        # Lance annotates each alteration as an iterable, but takes AlterColumn dicts.
        dataset.alter_columns(*({"path": c, "nullable": False} for c in nullable))  # type: ignore[arg-type]
    if not existing:
        dataset = table.dataset()
        dataset.update_field_metadata(
            {
                column: {PK_META.decode(): "true", PK_POSITION_META.decode(): str(position)}
                for position, column in enumerate(primary_key, start=1)
            }
        )
    dataset = table.dataset()
    dataset.initialize_mem_wal(
        bucket_column=spec.bucket_column,
        num_buckets=spec.num_buckets,
        identity_column=spec.identity_column,
        unsharded=spec.unsharded,
    )
    try:
        update_maintained_list(table)
    except MemwalError as exc:
        raise type(exc)(
            f"MemWAL is enabled on {table.uri}, but its maintained indexes were not listed ({exc}); "
            f"run memwal catchup {table.uri}"
        ) from exc
    dataset = table.dataset()
    details = dict(dataset.mem_wal_index_details() or {})
    return InitResult(
        table=table.uri,
        read_version=read_version,
        new_version=dataset.version,
        seconds=time.perf_counter() - started,
        primary_key=primary_key_of(dataset.schema),
        region_spec=details,
        maintained_indexes=list(details.get("maintained_indexes", [])),
    )
