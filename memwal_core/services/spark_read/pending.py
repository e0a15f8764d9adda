"""The keys that pending generations hold: a base row with one of them is stale, whichever task reads it.

Every base row of a read is checked against this set, so the check is the
read's hottest loop. Integer keys that lie close together (most tables'
ids) are kept as a map from key to region over their range: one array
index per row. Other keys (text, composite, integers spread thin) go in a
hash index.

A key held by two regions is refused: which of their rows is newer is not
defined, so no answer would be right (merges refuse it too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from memwal_core.errors import CorruptMetadataError
from memwal_core.services.merge.collapse import plain_keys, shared_key, with_region

if TYPE_CHECKING:
    import pandas as pd

# A range map is used while it takes at most this many entries per key it holds (and at most
# RANGE_LIMIT in all): 2 bytes an entry, against about 35 bytes a key in a hash index.
RANGE_PER_KEY = 16
RANGE_LIMIT = 1 << 28
NO_REGION = -1


@dataclass(frozen=True)
class KeyRange:
    """Integer keys as a map over [low, low + len(owner)): the index of the region holding each, or -1."""

    low: int
    owner: np.ndarray

    def held(self, keys: np.ndarray) -> np.ndarray:
        inside = (keys >= self.low) & (keys < self.low + len(self.owner))
        held = np.zeros(len(keys), dtype=bool)
        held[inside] = self.owner[keys[inside] - self.low] != NO_REGION
        return held


@dataclass(frozen=True)
class PendingKeys:
    """Every key of the pending generations, written or deleted, in a range map or a hash index."""

    primary_key: tuple[str, ...]
    ranged: KeyRange | None
    hashed: pd.Index | None

    def current(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of a base batch that no pending generation overrides."""
        import pandas as pd

        columns = [batch.column(k).to_numpy(zero_copy_only=False) for k in self.primary_key]
        if self.ranged is not None:
            kept = ~self.ranged.held(columns[0].astype(np.int64, copy=False))
        else:
            assert self.hashed is not None
            probe = columns[0] if len(columns) == 1 else pd.MultiIndex.from_arrays(columns)
            kept = self.hashed.get_indexer(probe) < 0
        return batch if kept.all() else batch.filter(pa.array(kept))


def pending_keys_of(keys: Mapping[str, Sequence[pa.Table]], primary_key: tuple[str, ...]) -> PendingKeys:
    """The pending keys from each region's generations' key columns (`keys`: region -> tables)."""
    tables = {
        region: pa.concat_tables(plain_keys(t, primary_key) for t in parts) for region, parts in keys.items()
    }
    ranged = _ranged(tables, primary_key)
    if ranged is not None:
        return PendingKeys(primary_key, ranged, None)
    return PendingKeys(primary_key, None, _hashed(tables, primary_key))


def _ranged(tables: Mapping[str, pa.Table], primary_key: tuple[str, ...]) -> KeyRange | None:
    """The range map of one-column integer keys, or None when the keys do not suit one."""
    if len(primary_key) != 1 or not all(_fits_int64(t.schema.field(0).type) for t in tables.values()):
        return None
    columns = {
        r: t.column(0).to_numpy().astype(np.int64, copy=False) for r, t in tables.items() if t.num_rows
    }
    if not columns:
        return KeyRange(0, np.zeros(0, dtype=np.int16))
    low = min(int(c.min()) for c in columns.values())
    span = max(int(c.max()) for c in columns.values()) - low + 1
    count = sum(len(c) for c in columns.values())
    if span > min(RANGE_LIMIT, RANGE_PER_KEY * count) or len(columns) >= np.iinfo(np.int16).max:
        return None
    owner = np.full(span, NO_REGION, dtype=np.int16)
    regions = list(columns)
    for number, region in enumerate(regions):
        offsets = columns[region] - low
        before = owner[offsets]
        if ((before != NO_REGION) & (before != number)).any():
            raise _shared_key_error(tables, primary_key)
        owner[offsets] = number
    return KeyRange(low, owner)


def _fits_int64(typ: pa.DataType) -> bool:
    width: int = typ.bit_width if pa.types.is_integer(typ) else 0
    return pa.types.is_signed_integer(typ) or (pa.types.is_unsigned_integer(typ) and width < 64)


def _hashed(tables: Mapping[str, pa.Table], primary_key: tuple[str, ...]) -> pd.Index:
    import pandas as pd

    distinct = {r: t.group_by(list(primary_key)).aggregate([]) for r, t in tables.items()}
    keys = pa.concat_tables(distinct.values())
    columns = [keys.column(k).to_numpy() for k in primary_key]
    index = pd.Index(columns[0]) if len(columns) == 1 else pd.MultiIndex.from_arrays(columns)
    if not index.is_unique:  # each region's keys are distinct, so a key repeats across regions
        raise _shared_key_error(distinct, primary_key)
    return index


def _shared_key_error(tables: Mapping[str, pa.Table], primary_key: tuple[str, ...]) -> CorruptMetadataError:
    distinct = [with_region(t.group_by(list(primary_key)).aggregate([]), r) for r, t in tables.items()]
    shared = shared_key(pa.concat_tables(distinct), primary_key)
    assert shared is not None, "a key repeats across regions"
    key, regions = shared
    shown = key[0] if len(key) == 1 else key
    return CorruptMetadataError(
        f"regions {', '.join(regions)} all hold primary key {shown!r} in pending generations; regions must "
        "never share keys, so which row is newest is not defined (read refused)"
    )
