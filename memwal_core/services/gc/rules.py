"""The GC policy and the rules that keep a generation, WAL entry or manifest version.

A generation goes only when it is merged, every maintained index has caught
up past it, and no retained base-table version has lower merge progress for
its region; its directory goes only a grace period after the region manifest
version that stopped listing it was written. WAL entries and manifest
versions go only once older than the fence retention (`retention.py`; see
docs/internals.md, "Garbage collection").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memwal_core.arguments import Count, Range, Seconds, check_fields
from memwal_core.services.defaults import (
    DEFAULT_FENCE_RETENTION_SECONDS,
    DEFAULT_GRACE_SECONDS,
    MAX_GRACE_SECONDS,
    MIN_FENCE_RETENTION_SECONDS,
)

# Why a generation is kept (the `reason` of `memwal gc --json`).
NOT_MERGED = "not_merged"
INDEX_NOT_CAUGHT_UP = "index_not_caught_up"
RETAINED_VERSION = "retained_version"
GRACE_PERIOD = "grace_period"
# An unlisted directory of a generation the writer has not committed yet: a flush may be in flight.
FLUSH_IN_PROGRESS = "flush_in_progress"


@dataclass(frozen=True)
class GcPolicy:
    """How conservative a GC run is. The defaults suit production; tests lower the times."""

    grace_seconds: Annotated[float, Range(0, MAX_GRACE_SECONDS)] = DEFAULT_GRACE_SECONDS
    # WAL entries and region manifest versions are kept this long: a writer (or a claim) stalled for
    # less finds every slot it may still write to taken, and so learns it was fenced.
    fence_retention_seconds: Annotated[float, Range(MIN_FENCE_RETENTION_SECONDS, MAX_GRACE_SECONDS)] = (
        DEFAULT_FENCE_RETENTION_SECONDS
    )
    # Newest region manifest versions kept (older ones only once superseded for the fence retention).
    keep_manifest_versions: Count = 10
    # Files a crashed process left go after this long: `_memwal_staging/` files of a Spark merge or
    # ingestion whose driver died, and `.tmp` uploads of a writer killed mid-put. A live job reads
    # or renames its own within minutes, so a day is far past any of them.
    abandoned_after_seconds: Seconds = 86_400.0

    def __post_init__(self) -> None:
        check_fields(self)  # a NaN would compare false with every bound and keep everything, silently


@dataclass(frozen=True)
class RegionBounds:
    """The highest generation of a region each rule lets go (0: none)."""

    merged: int
    index_caught_up: int
    retained: int

    def keep_reason(self, generation: int) -> str | None:
        """The rule that keeps a listed generation, or None if it may be pruned."""
        if generation > self.merged:
            return NOT_MERGED
        if generation > self.index_caught_up:
            return INDEX_NOT_CAUGHT_UP
        if generation > self.retained:
            return RETAINED_VERSION
        return None


def region_bounds(
    region: str,
    merged: int,
    index_catchup: dict[str, dict[str, int]],
    maintained_indexes: list[str],
    retained_merged: list[dict[str, int]],
) -> RegionBounds:
    """Bounds of one region from the latest progress, catch-up and every retained version's progress.

    An index absent from the catch-up record is not known to be caught up, so it keeps everything.
    """
    caught = min((index_catchup.get(name, {}).get(region, 0) for name in maintained_indexes), default=merged)
    retained = min((progress.get(region, 0) for progress in retained_merged), default=merged)
    return RegionBounds(merged=merged, index_caught_up=caught, retained=retained)
