"""A writer's claim of a region, verified when made and checked before a durable write is acknowledged.

Lance's writer learns that a newer writer claimed its region only when a
put-if-not-exists finds its next slot taken. A slot GC freed (after the fence
retention, or by another tool) lets the put succeed below the replay position:
acknowledged, yet never read. And a claim that overlapped another, or stalled
while others claimed, may have found the WAL's tip from a stale hint.

So memwal's writer asks the region's manifests itself. A claim is used only
if the newest manifest after it is exactly one epoch past the one before it.
Before acknowledging a durable write it checks that no later claim exists:
every claim writes the next manifest version with a higher epoch, and GC
deletes versions only below one older than the fence retention (at least a
day). So if the version after the newest one this writer knows is absent,
while that one is present, and the writer checked within the last hour, no
later claim exists: two HEADs in parallel. Otherwise it reads the newest
version (from the hint) and compares epochs.

A check tells what was true when it started, and a write acknowledged
within `MAX_UNCHECKED_SECONDS` of one is as safe: a claim made in between
writes its fence sentinel at the WAL's tip, this writer's next free slot,
where the write then fails; for the write to land unseen instead, GC would
have to free that slot in between, and it frees only what is older than the
fence retention (at least a day). A writer that stalled is always checked
when it wakes. So one check a second per region is enough, and costs little
on any store (checking after every write cost 10-18% of a durable writer's
throughput into 4 to 16 regions, measured by bench/ingest.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from memwal_core.errors import FencedError, NotFoundError
from memwal_core.model.region_store import RegionManifestStore

# The most time a write may be acknowledged after the last check started.
MAX_UNCHECKED_SECONDS = 1.0
# Within this long of the last check the version after the known one cannot have been collected
# (GC keeps versions for the fence retention, at least a day): two HEADs tell. After longer, a full read.
SHORTCUT_SECONDS = 3600.0


def _clocks() -> tuple[float, float]:
    """The monotonic and the wall clock: a frozen VM may stop one and not the other."""
    return time.monotonic(), time.time()


def _since(then: tuple[float, float]) -> float:
    now = _clocks()
    return max(now[0] - then[0], now[1] - then[1])


@dataclass
class Claim:
    """This writer's claim of `region`: the epoch it holds and the newest manifest version it knows."""

    manifests: RegionManifestStore
    epoch: int
    version: int
    # When the last check started, on both clocks.
    checked_at: tuple[float, float] = field(default_factory=_clocks)

    @staticmethod
    def epoch_before(manifests: RegionManifestStore) -> int:
        """The region's epoch before a claim (0: no manifest yet)."""
        try:
            return manifests.read_latest().writer_epoch
        except NotFoundError:
            return 0

    @classmethod
    def verified(cls, manifests: RegionManifestStore, before: int) -> Claim | None:
        """The claim just made, read back: its epoch is `before + 1` if the newest manifest has it.

        A newer epoch means another claim overlapped ours (or ours stalled while
        others claimed), and which of them is ours cannot be told: None.
        """
        started = _clocks()
        latest = manifests.read_latest()
        if latest.writer_epoch != before + 1:
            return None
        return cls(manifests, latest.writer_epoch, latest.version, checked_at=started)

    def due(self) -> bool:
        """Whether the next acknowledgement needs a check first."""
        return _since(self.checked_at) >= MAX_UNCHECKED_SECONDS

    def check(self) -> None:
        """Raise FencedError if a later claim of the region exists."""
        started = _clocks()
        if _since(self.checked_at) < SHORTCUT_SECONDS:
            paths = [self.manifests.path(self.version), self.manifests.path(self.version + 1)]
            known, after = self.manifests.store.exists_many(paths)
            moved = after or not known
        else:
            moved = True
        if moved:
            latest = self.manifests.read_latest()
            if latest.writer_epoch > self.epoch:
                raise FencedError(
                    f"region {self.manifests.region}: another writer claimed the region (epoch "
                    f"{latest.writer_epoch}, this writer's {self.epoch}) before this write was "
                    "acknowledged; it is not acknowledged, and this writer stops"
                )
            self.version = latest.version
        self.checked_at = started
