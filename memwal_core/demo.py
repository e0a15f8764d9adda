"""A demo MemWAL table written by Lance's own writer, with a backlog to work on.

The README's quick start runs this (so does `memwal demo`), and tests and
benchmarks use it to make realistic tables: several regions, many flushed
generations, updates, deletes and re-inserts, and a re-claimed region (so
writer epochs are above 1). Its regions are bucketed by `id`, so writers and
ingestion route to them. It returns the operations it applied, so callers
can build their own model of the expected rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from memwal_core.storage.options import StorageOptions

if TYPE_CHECKING:
    from memwal_core.model.routing import RegionSpec

DEMO_SCHEMA = pa.schema(
    [
        pa.field(
            "id",
            pa.int64(),
            nullable=False,
            metadata={"lance-schema:unenforced-primary-key": "true"},
        ),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
    ]
)


@dataclass
class DemoLog:
    """What the demo wrote: base rows, then per region the puts and deletes in order."""

    base: dict[int, tuple[str, float]] = field(default_factory=dict)
    ops: list[tuple[str, str, list[int], list[tuple[str, float]]]] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)

    def model(self) -> dict[int, tuple[str, float]]:
        """Expected rows of the fully merged table: key -> (name, score)."""
        rows = dict(self.base)
        for kind, _region, keys, values in self.ops:
            for i, key in enumerate(keys):
                if kind == "put":
                    rows[key] = values[i]
                else:
                    rows.pop(key, None)
        return rows


def write_demo_table(
    uri: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    base_rows: int = 1000,
    regions: int = 3,
    rounds: int = 4,
    rows_per_generation: int = 200,
    seed: int = 7,
) -> DemoLog:
    """Create a table at `uri`, enable MemWAL, and write a backlog through the native writer.

    Rows are routed by a bucket region spec on `id` with `regions` buckets, so
    `MemWalWriter` and `memwal ingest` work on the demo table as on any
    bucketed one. Each bucket's region is created as memwal's writer creates it
    (its manifest records the bucket), then written by Lance's own writer: its
    generations update keys of that bucket, insert new ones and delete some.
    The last region's writer is re-opened, which claims the region again and
    bumps its epoch.
    """
    import lance

    from memwal_core.model.region_directory import RegionDirectory
    from memwal_core.model.routing import region_spec_of
    from memwal_core.model.table import MemWalTable

    rng = random.Random(seed)
    options = StorageOptions(storage_options or {})
    log = DemoLog()
    log.base = {k: (f"base-{k}", float(k)) for k in range(base_rows)}
    keys = sorted(log.base)
    base = pa.table(
        {
            "id": keys,
            "name": [log.base[k][0] for k in keys],
            "score": [log.base[k][1] for k in keys],
        },
        schema=DEMO_SCHEMA,
    )
    dataset = lance.write_dataset(base, uri, mode="create", storage_options=options.as_dict())
    dataset.initialize_mem_wal(bucket_column="id", num_buckets=regions)
    spec = region_spec_of(dataset)
    assert spec is not None, "initialize_mem_wal(bucket_column=...) records a region spec"
    buckets, region_values = spec.route(base)
    key_schema = pa.schema([DEMO_SCHEMA.field("id")])
    with MemWalTable(uri, options) as table:
        directory = RegionDirectory(table, spec)
        for r, value in enumerate(region_values):
            region = directory.region_for(value)
            log.regions.append(region)
            owned = [k for k, b in zip(keys, buckets, strict=True) if b == r]
            fresh_keys = _bucket_keys(spec, r, start=base_rows + r * 1_000_000)
            claims = 2 if r == regions - 1 else 1
            per_claim = -(-rounds // claims)
            written = 0
            for _claim in range(claims):
                with dataset.mem_wal_writer(region, max_memtable_rows=rows_per_generation) as writer:
                    for _round in range(min(per_claim, rounds - written)):
                        updates = rng.sample(owned, min(len(owned), rows_per_generation // 2))
                        fresh = [next(fresh_keys) for _ in range(rows_per_generation - len(updates))]
                        owned.extend(fresh)
                        put_keys = updates + fresh
                        values = [(f"r{r}-v{rng.randrange(10**6)}", rng.random()) for _ in put_keys]
                        writer.put(
                            pa.table(
                                {
                                    "id": put_keys,
                                    "name": [v[0] for v in values],
                                    "score": [v[1] for v in values],
                                },
                                schema=DEMO_SCHEMA,
                            )
                        )
                        log.ops.append(("put", region, put_keys, values))
                        doomed = rng.sample(owned, max(1, rows_per_generation // 20))
                        writer.delete(pa.table({"id": doomed}, schema=key_schema))
                        log.ops.append(("delete", region, doomed, []))
                        written += 1
    return log


def _bucket_keys(spec: RegionSpec, bucket: int, *, start: int) -> Iterator[int]:
    """New keys from `start` up that the spec routes to `bucket`, in ascending order."""
    chunk = 1024
    while True:
        candidates = pa.table({"id": pa.array(range(start, start + chunk), pa.int64())})
        codes, _values = spec.route(candidates)
        yield from (start + i for i in range(chunk) if codes[i] == bucket)
        start += chunk
