"""The one lease that serialises every writer of the MemWAL index details.

Lance takes a rewritten `__lance_mem_wal` index verbatim, merge progress
included, and does not stop a lost update (see the format doc). So the
snapshot builder holds this lease from re-reading progress until it has
verified its commit, and every merger holds it around its commit only, so
that collapses still run in parallel.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memwal_core.model.lease import Lease
from memwal_core.storage.object_store import ObjectStore

DETAILS_LEASE = "index-details"
DEFAULT_DETAILS_LEASE_TTL = 300.0
# Commits are short; poll often so a merger waiting behind another merger's commit loses little.
POLL_SECONDS = 0.1


@contextmanager
def details_lease(
    store: ObjectStore, *, ttl: float = DEFAULT_DETAILS_LEASE_TTL, wait: float | None = None
) -> Iterator[Lease]:
    """Hold the index-details lease, waiting up to `wait` seconds (default: the TTL) to get it."""
    lease = Lease(store, DETAILS_LEASE, ttl=ttl)
    lease.acquire(wait=ttl if wait is None else wait, poll=POLL_SECONDS)
    try:
        yield lease
    finally:
        lease.release()


def check_details_lease(store: ObjectStore, *, ttl: float = DEFAULT_DETAILS_LEASE_TTL) -> None:
    """CorruptMetadataError, naming the record, if the lease's newest record is unreadable and young.

    Every merge commit takes this lease: a round that went on would collapse
    every region only to fail them all at their commits, with one error each.
    """
    Lease(store, DETAILS_LEASE, ttl=ttl).latest()
