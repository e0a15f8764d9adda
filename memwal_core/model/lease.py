"""Leases in the table's own storage, so every process (CLI, Dagster, Spark driver) sees them.

A lease is a sequence of numbered JSON records under `_memwal_leases/{name}/`.
Every state change (acquire, renew, release, take over an expired lease)
writes the next number with put-if-not-exists, so exactly one writer wins
each change and a holder that loses a renewal knows it lost the lease.
Expiry is wall-clock time, so holders renew well before it (`ttl / 3`), and
a host writes a record only while its clock agrees with the store's
(`clock.py`): before a take-over, and in every write's own read-back.

A newest record that cannot be decoded (torn, garbled, zeroed, or expiring
more than `MAX_TTL` after it was written) is held by
nobody we can name. It is never free at once, or a second merger could take a
region from a live holder whose record got damaged; nor is it held forever,
or one damaged object would stop every merge of the table. It counts as held
for one TTL after the object's modification time, then it is taken over like
an expired record: a live holder renews at least every `ttl / 3`, each renewal
a new record, so a newest record older than a TTL has no live holder. While
it counts as held, the lease fails with CorruptMetadataError naming the
object and the time it frees; the takeover is logged with the object's path.

A holder may name the progress at which its work is done (`done_at`: a
merge's target generation). A taker that has read progress at or past it
(`progress`: the region's merged generation when its plan was read) finds the
lease free: that work has landed, so the holder, if it still runs, has
nothing left to do under it. A merge therefore gives back no lease of a
region it committed (a PUT per region saved); it gives back every other.

A holder is named by its host, PID, a random part, and where its PID means a
process: the kernel's boot and the PID namespace. A holder of this boot and
namespace whose PID no longer exists is dead (e.g. `kill -9`) and frees the
lease at once; any other (a container of the same host name, another host, a
holder of an earlier memwal) keeps it until it expires.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwal_core.errors import (
    AlreadyExistsError,
    ClockSkewError,
    CorruptMetadataError,
    LeaseBusyError,
    LeaseLostError,
    NotFoundError,
)
from memwal_core.format.naming import LEASE_DIR
from memwal_core.model.clock import check_clock, ensure_checked
from memwal_core.storage.object_store import ObjectStore

log = logging.getLogger(__name__)

KEEP_RECORDS = 16
# Records are pruned once this many can go, in one batch delete (S3's DeleteObjects): a lease keeps at
# most KEEP_RECORDS + PRUNE_BATCH records besides those younger than PRUNE_AGE, one LIST page.
PRUNE_BATCH = 16
# A record is pruned only once a record written this much later (by the store's clock) exists, so a
# number can be written again only by a writer whose decision is older than this: see `_verified`.
PRUNE_AGE = 60.0
# How many times a lease's records are listed again when the newest one listed was pruned before it was read.
RELISTS = 3
# No holder asks for more than this: a record that expires further after it was written is damaged.
MAX_TTL = 86_400.0


@dataclass(frozen=True)
class LeaseRecord:
    seq: int
    owner: str | None
    expires_at: float
    # Decoded from nothing: an undecodable record past its TTL (see the module docstring).
    unreadable: bool = False
    # The progress at which the holder's work is done, if it named one (see the module docstring).
    done_at: int | None = None

    def live(self, now: float, progress: int | None = None) -> bool:
        """Held, unexpired, not done by the `progress` the caller read, and not by a process of this
        host that has died (e.g. kill -9)."""
        if self.done_at is not None and progress is not None and progress >= self.done_at:
            return False
        return self.owner is not None and self.expires_at > now and not _dead_local_owner(self.owner)


def decode_record(seq: int, raw: bytes) -> LeaseRecord | None:
    """The record stored as `raw`, or None if it is not one (a string or null owner, a finite expiry)."""
    try:
        data: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    owner, expires_at, done_at = data.get("owner"), data.get("expires_at"), data.get("done_at")
    if not (owner is None or isinstance(owner, str)):
        return None
    if done_at is not None and (isinstance(done_at, bool) or not isinstance(done_at, int)):
        return None
    if (
        isinstance(expires_at, bool)
        or not isinstance(expires_at, int | float)
        or not math.isfinite(expires_at)
    ):
        return None
    return LeaseRecord(seq, owner, float(expires_at), done_at=done_at)


@functools.cache
def pid_namespace() -> str | None:
    """Where a PID names one process: this kernel's boot id and this process's PID namespace (None where
    unknown: not Linux). A host name does not tell: containers of one host may share it, each with
    its own PIDs, and the same boot and namespace exist on no other machine."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return f"{boot}/{namespace.removeprefix('pid:[').removesuffix(']')}"


def _owner_id() -> str:
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    namespace = pid_namespace()
    return owner if namespace is None else f"{owner}:{namespace}"


def _dead_local_owner(owner: str) -> bool:
    """Whether `owner` was a process of this boot and PID namespace that no longer exists.

    Only a provably dead holder counts: another namespace or host, an owner that names none (an
    earlier memwal's), a live or unknown PID, or a PID we may not signal all keep the lease until it
    expires.
    """
    parts = owner.split(":")
    if len(parts) != 4 or parts[3] != pid_namespace():
        return False
    pid_text = parts[1]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class Lease:
    """One named lease (e.g. `merge-{region}`) held by this process.

    `done_at`: the progress at which this holder's work is done, written in its
    records; `progress`: the progress the caller read, which frees a holder done
    by then (see the module docstring).
    """

    def __init__(
        self,
        store: ObjectStore,
        name: str,
        *,
        ttl: float = 300.0,
        done_at: int | None = None,
        progress: int | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.ttl = ttl
        self.done_at = done_at
        self.progress = progress
        self.owner = _owner_id()
        self.dir = f"{LEASE_DIR}/{name}"
        # When this holder last wrote a record of its own (monotonic): a renewal is decided on then.
        self._written = time.monotonic()
        self.held: LeaseRecord | None = None

    def _path(self, seq: int) -> str:
        return f"{self.dir}/{seq:020d}.json"

    def _stored(self) -> dict[int, float]:
        """The records stored now: number -> modification time (one LIST)."""
        stored = {}
        for info in self.store.list_files(self.dir):
            name = info.path.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                stored[int(name[:-5])] = info.mtime
        return stored

    def latest(self) -> LeaseRecord | None:
        """The newest record, or None if the lease was never taken.

        CorruptMetadataError if it cannot be decoded and is younger than the TTL.
        """
        return self._newest()[1]

    def _newest(self) -> tuple[dict[int, float], LeaseRecord | None]:
        """The records stored (one LIST) and the newest of them, read.

        The newest listed record can be gone by the time it is read: a holder that takes the lease
        prunes the records KEEP_RECORDS back, so it has taken the lease that many times since this
        LIST (a reader stalled between the two, or a holder taking it commit after commit). Newer
        records exist then, so the records are listed again; LeaseBusyError if that keeps happening.
        """
        for _ in range(RELISTS):
            stored = self._stored()
            try:
                return stored, self._read_latest(stored)
            except NotFoundError:
                continue
        raise LeaseBusyError(
            f"lease {self.name} of {self.store.uri} is taken again and again faster than it can be read"
        )

    def _read_latest(self, stored: dict[int, float]) -> LeaseRecord | None:
        if not stored:
            return None
        seq = max(stored)
        record = decode_record(seq, self.store.read(self._path(seq)))
        if record is not None and record.expires_at <= stored[seq] + MAX_TTL:
            return record
        frees_at = stored[seq] + self.ttl
        if time.time() < frees_at:
            when = datetime.fromtimestamp(frees_at, UTC).isoformat(timespec="seconds")
            raise CorruptMetadataError(
                f"lease record {self.store.describe(self._path(seq))} is unreadable; it counts as held "
                f"until {when} (the lease's {self.ttl:g} s TTL after it was written), then it is taken over"
            )
        return LeaseRecord(seq, None, frees_at, unreadable=True)

    def _put(self, seq: int, owner: str | None, expires_at: float) -> float:
        """Write record `seq` (put-if-not-exists); when it was written, by this host's clock."""
        written_at = time.time()
        record: dict[str, object] = {"owner": owner, "expires_at": expires_at, "written_at": written_at}
        if owner is not None and self.done_at is not None:
            record["done_at"] = self.done_at
        self.store.put_if_not_exists(self._path(seq), json.dumps(record).encode())
        return written_at

    def _write(self, seq: int, owner: str, expires_at: float, decided: float) -> LeaseRecord | None:
        """Write record `seq`, decided on at `decided` (monotonic); None if it was decided on so long ago
        that newer records show it stale.

        Others judge its expiry by their clocks, so it is written only while this host's clock agrees
        with the store's: read back by `_verified`, its stored time is checked; else this host's clock
        was found right lately (`ensure_checked`). ClockSkewError otherwise (a record read back is
        given back).
        """
        reads_back = self._reads_back(decided)
        if not reads_back:
            ensure_checked(self.store)
        written_at = self._put(seq, owner, expires_at)
        if reads_back and not self._verified(seq, written_at):
            log.warning(
                "lease %s of %s: record %d was written %.0f s after it was decided on, and newer records "
                "exist: the lease is not held",
                self.name,
                self.store.uri,
                seq,
                time.monotonic() - decided,
            )
            return None
        self._written = time.monotonic()
        return LeaseRecord(seq, owner, expires_at, done_at=self.done_at)

    def _reads_back(self, decided: float) -> bool:
        """Whether a write decided on at `decided` lists the records again (`_verified`)."""
        return self.store.lists_cheaply or time.monotonic() - decided >= PRUNE_AGE / 2

    def _verified(self, seq: int, written_at: float) -> bool:
        """Whether record `seq`, written at `written_at` (this host's clock), is the newest, for a write
        decided on long ago; ClockSkewError, the record given back, if its stored time disagrees.

        A conditional PUT proves only that `seq` did not exist at that moment. A
        number pruned since may be written again: a writer that paused between
        reading the records and writing (or between two renewals) while another
        holder took the lease KEEP_RECORDS times. Pruning waits PRUNE_AGE, so
        only a write decided on at least that long before can land on a pruned
        number; such a write lists the records again, and holds the lease only if
        its record is there and the newest. So does every write on local disk,
        where a listing is cheap but no snapshot: one that raced a holder's pruning
        can come back empty, and the lease then looks never taken.
        """
        stored = self._stored()
        newest = seq in stored and max(stored) == seq
        if seq in stored:
            try:
                check_clock(
                    self.store, stored[seq], written_at, time.time(), self.store.describe(self._path(seq))
                )
            except ClockSkewError:
                if newest:
                    self._give_back(seq)
                raise
        return newest

    def _give_back(self, seq: int) -> None:
        """Write the free record after `seq` (a holder that took it since wins); never checked."""
        with contextlib.suppress(AlreadyExistsError):
            self._put(seq + 1, None, 0.0)

    def try_acquire(self) -> bool:
        """Take the lease if it is free or expired; False if a live holder has it."""
        decided = time.monotonic()
        try:
            stored, current = self._newest()
        except LeaseBusyError:
            return False
        # A holder's expiry is judged by this host's clock: it must agree with the store's.
        ensure_checked(self.store)
        now = time.time()
        if current is not None and current.live(now, self.progress) and current.owner != self.owner:
            return False
        seq = current.seq + 1 if current else 1
        try:
            self.held = self._write(seq, self.owner, now + self.ttl, decided)
        except AlreadyExistsError:
            return False
        if self.held is None:
            return False
        if current is not None and current.unreadable:
            log.warning(
                "lease record %s was unreadable and older than the lease's %g s TTL: taken over",
                self.store.describe(self._path(current.seq)),
                self.ttl,
            )
        # Only records the LIST saw, so a quiet lease costs no DELETE at all; and only a batch's worth
        # at once, so a lease taken once a merge round costs one batch delete every PRUNE_BATCH rounds,
        # not a DELETE every round.
        newest = max(stored.values(), default=0.0)
        pruned = [
            old for old, mtime in stored.items() if old <= seq - KEEP_RECORDS and mtime <= newest - PRUNE_AGE
        ]
        if len(pruned) >= PRUNE_BATCH:
            self.store.delete_many([self._path(old) for old in pruned])
        return True

    def acquire(self, *, wait: float = 0.0, poll: float = 0.5) -> Lease:
        """Take the lease, waiting up to `wait` seconds; LeaseBusyError if it stays taken."""
        deadline = time.monotonic() + wait
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                holder = self.latest()
                who = holder.owner if holder else "?"
                raise LeaseBusyError(f"lease {self.name} of {self.store.uri} is held by {who}")
            time.sleep(poll)
        return self

    def renew(self) -> None:
        """Extend our lease; LeaseLostError if it expired and someone else took it."""
        if self.held is None:
            raise LeaseLostError(f"lease {self.name} is not held")
        try:
            self.held = self._write(self.held.seq + 1, self.owner, time.time() + self.ttl, self._written)
        except AlreadyExistsError:
            self.held = None
        except ClockSkewError:
            self.held = None  # given back, or never written
            raise
        if self.held is None:
            raise LeaseLostError(f"lease {self.name} of {self.store.uri} was taken over by another holder")

    def due(self) -> bool:
        """Whether `ensure` has anything to do: the lease is not held, or a third of its TTL has passed."""
        return self.held is None or self.held.expires_at - time.time() < self.ttl * 2 / 3

    def ensure(self) -> None:
        """Renew if a third of the TTL has passed; call before every irreversible step."""
        if self.held is None:
            raise LeaseLostError(f"lease {self.name} is not held")
        if self.due():
            self.renew()

    def release(self) -> None:
        """Give the lease back (a free record), if we still hold it."""
        if self.held is None:
            return
        self._give_back(self.held.seq)
        self.held = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
