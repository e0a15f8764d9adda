"""The GC policy and the rules that keep a generation, WAL entry or manifest version.

A generation goes only when it is merged, every maintained index has caught
up past it, and no retained base-table version has lower merge progress for
its region; its directory goes only a grace period after the region manifest
version that stopped listing it was written (see docs/internals.md,
"Garbage collection").
"""

from __future__ import annotations

from dataclasses import dataclass

from memwal_core.errors import BadInputError

# Why a generation is kept (the `reason` of `memwal gc --json`).
NOT_MERGED = "not_merged"
INDEX_NOT_CAUGHT_UP = "index_not_caught_up"
RETAINED_VERSION = "retained_version"
GRACE_PERIOD = "grace_period"
# An unlisted directory of a generation the writer has not committed yet: a flush may be in flight.
FLUSH_IN_PROGRESS = "flush_in_progress"
# Why a WAL entry is kept.
WAL_NOT_FLUSHED = "not_flushed"
WAL_TAIL = "wal_tail"
WAL_TOO_YOUNG = "wal_min_age"
WAL_FENCE_SENTINEL = "newest_fence_sentinel"

DEFAULT_GRACE_SECONDS = 3600.0


@dataclass(frozen=True)
class GcPolicy:
    """How conservative a GC run is. The defaults suit production; tests lower the times."""

    grace_seconds: float = DEFAULT_GRACE_SECONDS
    # Newest covered WAL entries kept: a stalled, fenced writer must not find its positions free.
    wal_tail: int = 16
    # Covered WAL entries younger than this are kept too; None means the grace period.
    wal_min_age_seconds: float | None = None
    # Newest region manifest versions kept (older ones only once superseded for the grace period).
    keep_manifest_versions: int = 10
    # Files a crashed process left go after this long: `_memwal_staging/` files of a Spark merge or
    # ingestion whose driver died, and `.tmp` uploads of a writer killed mid-put. A live job reads
    # or renames its own within minutes, so a day is far past any of them.
    abandoned_after_seconds: float = 86_400.0

    def __post_init__(self) -> None:
        if self.grace_seconds < 0:
            raise BadInputError(f"--grace-seconds must be 0 or more, not {self.grace_seconds}")
        if self.wal_tail < 0:
            raise BadInputError(f"the WAL tail must be 0 or more entries, not {self.wal_tail}")
        if self.wal_min_age_seconds is not None and self.wal_min_age_seconds < 0:
            raise BadInputError(
                f"the WAL minimum age must be 0 or more seconds, not {self.wal_min_age_seconds}"
            )
        if self.abandoned_after_seconds < 0:
            raise BadInputError(
                f"the abandoned-file age must be 0 or more seconds, not {self.abandoned_after_seconds}"
            )
        if self.keep_manifest_versions < 1:
            raise BadInputError(
                f"at least 1 region manifest version must be kept, not {self.keep_manifest_versions}"
            )

    @property
    def wal_min_age(self) -> float:
        return self.grace_seconds if self.wal_min_age_seconds is None else self.wal_min_age_seconds


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
