"""`MemWalWriter`: rows in, routed to their regions, written by Lance's native writer.

One native `ShardWriter` per region, opened on first use and reused. Rows are
checked against the table schema before anything is written, routed with
Lance's own rule (`model/routing.py`), and each region's part goes to its
writer in chunks no larger than the MemTable row limit (Lance refuses a write
bigger than that). Parts for different regions are written in parallel: a
durable put waits for the next WAL flush, so serial regions would add up.

A put or delete that returns is acknowledged: with durable writes (the
default) its WAL entry is stored, and a later writer of the region replays it.
Before acknowledging, a durable write also checks that no later writer has
claimed the region (`model/claim.py`): Lance's writer notices a newer claim
only when its next WAL slot is taken, and a slot freed by a GC would let it
write where no replay reads.
A call that raises may have written some regions and not others; puts and
deletes are idempotent by key, so retrying the whole call is safe.

Lost responses on the write path are survived, within bounds:
- a WAL write whose answer was lost is written again after a fresh claim of
  the region (its replay holds whatever did land), at most `WRITE_ATTEMPTS`
  times, before the caller gets `UncertainWriteError`;
- a claim whose own manifest PUT got no answer, while the store holds the
  epoch it claimed, is taken as landed and claimed again, at most
  `CLAIM_ATTEMPTS` times (Lance reports it as "another writer claimed epoch
  N"; `lance_errors.write_failure` says how the two are told apart); a claim
  another writer's overtook raises `FencedError`, and the region stays
  fenced: claiming again would fence the writer that won;
- a native call that has not returned within the storage time limits (Lance
  retries some lost answers without end) is abandoned as uncertain.
A native writer given up after a failure may not have flushed what it had
acknowledged (its close fails too, or never runs): that region is settled by
a fresh claim (which replays the WAL) and a close before `flush()` or
`close()` report success, so a writer that closes cleanly leaves every
acknowledged write in a flushed generation. Nor is a clean native close
trusted: Lance 14's returns without flushing a sealed MemTable whose
background flush gave up, so the region's manifest must show the writer's
generations flushed, or the region is settled the same way.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from memwal_core.arguments import build, checked, region_id
from memwal_core.errors import (
    BadInputError,
    FencedError,
    MemwalError,
    StorageError,
    UncertainWriteError,
    first_line,
    shown,
)
from memwal_core.lance_errors import (
    WriteFailure,
    claim_taken,
    is_memory_ceiling_refusal,
    is_overfull_replay,
    permission_denied,
    write_failure,
)
from memwal_core.model.claim import Claim
from memwal_core.model.region_directory import RegionDirectory
from memwal_core.model.routing import RegionKey, RegionSpec, partition_by_code, region_spec_of
from memwal_core.model.rows import conform, iter_tables, key_rows
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import MAX_WAL_FLUSH_INTERVAL_MS
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.retry import Throttled

if TYPE_CHECKING:
    from lance.mem_wal import ShardWriter

log = logging.getLogger("memwal.writer")
T = TypeVar("T")

LANCE_MEMTABLE_ROWS = 100_000
# The limits of the one-off claims that replay a WAL generation over our MemTable limits
# (`lance_errors.OVERFULL_REPLAY`), tried smallest first: Lance reserves memory for in-memory
# indexes in step with the row limit, and refuses 10M rows on a table with a vector index
# (a reserve of about 990 MB, over its 1 GB ceiling), while such a generation is usually only a
# little over the limits it was written with.
RECOVERY_LIMITS: tuple[dict[str, Any], ...] = (
    {"max_memtable_rows": 1_000_000, "max_memtable_batches": 100_000},
    {"max_memtable_rows": 10_000_000, "max_memtable_batches": 1_000_000},
)


# Counts and sizes go to Lance and Arrow, which take them as (at most) signed 64-bit integers.
INT64_MAX = 2**63 - 1
# Regions written (or closed) at once: their WAL writes and flushes overlap.
REGION_THREADS = 16
# Tries at one chunk whose WAL write's answer was lost, each after a fresh claim of the region.
WRITE_ATTEMPTS = 3
# Tries at a claim that is not usable while no other writer is known to hold the region: its own
# manifest PUT got no answer, or another claim overlapped it (`_verified_claim`).
CLAIM_ATTEMPTS = 3
# The WAL flush interval assumed when the options leave it to Lance (its default is well under this).
DEFAULT_WAL_FLUSH_INTERVAL_S = 1.0
# The WAL buffer size a durable writer gives Lance unless told otherwise: every put's entry is over
# it, so Lance writes the entry at once instead of at its next interval tick (100 ms by default).
# Lance runs one put per region writer at a time, so that wait never gathered puts into one WAL
# write; it only added about half an interval to every durable put.
DURABLE_WAL_BUFFER_BYTES = 1
# MemTable memory per region unless the user or the table says otherwise. Lance's own (256 MB per
# MemTable, 1 GB of unflushed MemTables before puts wait) let a writer fed faster than its MemTables
# flush grow by about 25 MB per million rows per 4 regions (12M rows: 334 -> 586 MiB); with these it
# stayed at about 390 MiB, at the same speed. A region that needs more room (its index reserve, for
# large `max_memtable_rows`) is claimed with Lance's defaults instead.
MEMTABLE_MEMORY = {"max_memtable_size": 32 << 20, "max_unflushed_memtable_bytes": 64 << 20}


@dataclass(frozen=True)
class WriterOptions:
    """Lance's native writer settings, passed through as given (None: the table's default).

    Checked when made, because Lance checks some of them only after it has
    claimed the region, which fences the region's live writer for nothing: a
    zero `max_memtable_rows` fails the first put, a zero `max_memtable_batches`
    panics, a flush interval of hours makes every durable put wait that long.
    """

    durable_write: bool | None = True
    max_wal_buffer_size: int | None = None
    max_wal_flush_interval_ms: int | None = None
    max_memtable_size: int | None = None
    max_memtable_rows: int | None = None
    max_memtable_batches: int | None = None
    max_unflushed_memtable_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.durable_write is not None and not isinstance(self.durable_write, bool):
            raise BadInputError(
                f"writer option durable_write must be true or false, not {shown(self.durable_write)}"
            )
        for name, value in asdict(self).items():
            if name == "durable_write" or value is None:
                continue
            highest = MAX_WAL_FLUSH_INTERVAL_MS if name == "max_wal_flush_interval_ms" else INT64_MAX
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
                raise BadInputError(
                    f"writer option {name} must be a whole number from 1 to {highest}, not {shown(value)}"
                )

    def native(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _fenced(region: str) -> FencedError:
    return FencedError(f"region {region}: this writer was fenced: another writer claimed the region")


def _native_error(region: str, exc: Exception) -> MemwalError:
    """A Lance writer error as ours: fencing, bad rows, a write of unknown outcome, or storage trouble."""
    failure = write_failure(exc)
    if failure is WriteFailure.LOST_RESPONSE:
        return UncertainWriteError(
            f"region {region}: a WAL write's response was lost, so it may or may not have been applied; "
            "the next call re-opens the region"
        )
    if failure is WriteFailure.CLAIM_UNANSWERED:
        return UncertainWriteError(
            f"region {region}: the claim's manifest write got no answer, and the region's newest manifest "
            "holds the epoch it claimed: taken as this writer's own claim; the region is claimed again"
        )
    if failure is WriteFailure.FENCED:
        taken = claim_taken(exc)
        if taken is None:
            return _fenced(region)
        found, target, refused = taken
        own = (
            " (or the object store retried this writer's own claim after losing its answer, and no "
            "other writer exists: the two look alike)"
            if refused and found == target
            else ""
        )
        return FencedError(
            f"region {region}: another writer claimed the region first (epoch {found}; this writer's "
            f"claim was for epoch {target}){own}; this writer stops"
        )
    if failure is WriteFailure.INVALID_INPUT:
        return BadInputError(f"region {region}: Lance refused the rows: {first_line(exc)}")
    refusal = permission_denied(exc)
    if refusal is not None:
        return StorageError(f"region {region}: the store refused the write ({refusal}): {first_line(exc)}")
    return StorageError(f"region {region}: write failed: {first_line(exc)}")


def _claim_failure(region: str, exc: Exception) -> UncertainWriteError:
    """A claim Lance refused, raised as ours; returned instead if it is to be tried again (its answer was lost)."""
    error = _native_error(region, exc)
    if isinstance(error, UncertainWriteError):
        return error
    raise error from None


def _bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """`call()` in a daemon thread, given up as uncertain after `seconds`.

    Lance retries some lost answers without end (a WAL PUT answered 500 is
    written again at the next position, for as long as the answers are lost),
    so a native call gets the storage time limits and no more. The thread is
    a daemon so a call that never returns cannot hold the process at exit.
    """
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the waiting caller below
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="memwal-native-write", daemon=True).start()
    if not done.wait(seconds):
        raise UncertainWriteError(
            f"{what}: storage did not answer within {seconds:g} s, so the write may or may not have "
            "been applied; the region is re-claimed before anything else is written to it"
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _flushed_through(writer: ShardWriter) -> int | None:
    """The region's current generation once everything a native writer holds is flushed; None: it holds
    nothing (no rows, no frozen MemTable, no failed flush).

    A flush of generation g makes g + 1 the region's current generation, and a
    writer's frozen MemTables are the generations below its active one.
    """
    memtable = writer.memtable_stats()
    generation = int(memtable["generation"])
    if memtable["row_count"]:
        return generation + 1
    if memtable["frozen_count"] or writer.stats().get("memtable_flush_failures"):
        return generation
    return None


@dataclass
class _RegionCounters:
    rows_put: int = 0
    rows_deleted: int = 0
    calls: int = 0


class MemWalWriter:
    """Streams puts and deletes into a MemWAL table's regions; use it as a context manager."""

    @checked
    def __init__(
        self,
        uri: str,
        storage_options: StorageOptions | Mapping[str, str] | None = None,
        *,
        options: WriterOptions | None = None,
        region: str | None = None,
        **native: Any,
    ) -> None:
        """Open the table; `region` pins every row to one region (required for manually-regioned tables).

        Extra keyword arguments are `WriterOptions` fields (`durable_write=False`, ...).
        """
        given = (
            storage_options
            if isinstance(storage_options, StorageOptions)
            else StorageOptions(storage_options)
        )
        self.table = MemWalTable.open(uri, given.for_service("writer"))
        self.options = options or build(WriterOptions, native)
        self._dataset = self.table.latest
        self.schema: pa.Schema = self.table.schema
        self.primary_key = self.table.primary_key
        self.spec: RegionSpec | None = region_spec_of(self._dataset)
        if region is None and self.spec is None:
            raise BadInputError(f"table {self.table.uri} has manually managed regions: pass region=")
        self._pinned = region
        self._directory = RegionDirectory(self.table, self.spec) if self.spec is not None else None
        self._pinned_value: tuple[RegionKey | None] | None = None  # read on first use
        defaults = (self._dataset.mem_wal_index_details() or {}).get("writer_config_defaults") or {}
        self.chunk_rows = int(
            self.options.max_memtable_rows or defaults.get("max_memtable_rows") or LANCE_MEMTABLE_ROWS
        )
        self._native_options = self.options.native()
        # The memory limits memwal chose (not the user or the table), dropped if Lance finds no room.
        chosen = all(getattr(self.options, k) is None and k not in defaults for k in MEMTABLE_MEMORY)
        self._bounded_memory = dict(MEMTABLE_MEMORY) if chosen else {}
        self._native_options.update(self._bounded_memory)
        durable = (
            defaults.get("durable_write", True)
            if self.options.durable_write is None
            else self.options.durable_write
        )
        if durable and self.options.max_wal_buffer_size is None and "max_wal_buffer_size" not in defaults:
            self._native_options["max_wal_buffer_size"] = DURABLE_WAL_BUFFER_BYTES
        self._durable = bool(durable)
        self._writers: dict[str, ShardWriter] = {}
        # Each open region's claim, checked before a durable write is acknowledged (`model/claim.py`).
        self._claims: dict[str, Claim] = {}
        self._fenced: set[str] = set()
        # Regions whose native writer was given up after a failure: what it acknowledged may be in
        # the WAL only, so a fresh claim and close must flush it before this writer reports success.
        self._unsettled: set[str] = set()
        limits = self.table.storage_options.time_limits()
        interval = (
            self.options.max_wal_flush_interval_ms / 1000
            if self.options.max_wal_flush_interval_ms
            else DEFAULT_WAL_FLUSH_INTERVAL_S
        )
        # One native call: a WAL flush, then every attempt at its requests, twice over (a put may
        # wait behind a MemTable flush of the same region).
        self.call_seconds = interval + 2 * (limits.total + limits.request)
        self._counters: dict[str, _RegionCounters] = {}
        self._closed_stats: dict[str, dict[str, Any]] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- routing ----------------------------------------------------------

    def _split(self, rows: pa.Table) -> dict[str, pa.Table]:
        """Rows per region id, each in input order; a pinned writer takes only its region's keys."""
        if self.spec is None or self._directory is None:
            return {str(self._pinned): rows}
        if self._pinned is not None:
            self._check_pinned(rows, self._pinned, self.spec, self._directory)
            return {self._pinned: rows}
        codes, keys = self.spec.route(rows)
        parts = partition_by_code(rows, codes, len(keys))
        return {
            self._directory.region_for(key): part
            for key, part in zip(keys, parts, strict=True)
            if part is not None
        }

    def _check_pinned(
        self, rows: pa.Table, region: str, spec: RegionSpec, directory: RegionDirectory
    ) -> None:
        """Refuse rows that route elsewhere: readers would find their keys in two regions, the older winning."""
        if self._pinned_value is None:
            self._pinned_value = (directory.value_of(region),)
        served = self._pinned_value[0]
        if served is None:
            return  # a region that serves no value of the spec: the caller routes by hand
        codes, keys = spec.route(rows)
        stray = np.isin(codes, [i for i, key in enumerate(keys) if key != served])
        if stray.any():
            first = rows.slice(int(np.flatnonzero(stray)[0]), 1).to_pylist()[0]
            sample = {c: first[c] for c in self.primary_key}
            raise BadInputError(
                f"region {region}: this writer is pinned to it, but {int(stray.sum())} row(s) route to "
                f"other regions (e.g. key {sample}); nothing was written"
            )

    def _writer(self, region: str) -> ShardWriter:
        if region in self._fenced:
            raise _fenced(region)
        writer = self._writers.get(region)
        if writer is None:
            try:
                writer, claim = self._open(region)
            except FencedError:
                self._fenced.add(region)  # another writer won the region: claiming again would fence it
                raise
            self._writers[region] = writer
            self._unsettled.discard(region)  # the claim replayed whatever its predecessor left
            self._counters.setdefault(region, _RegionCounters())
            self._claims[region] = claim
        return writer

    def _open(self, region: str) -> tuple[ShardWriter, Claim]:
        """Claim the region; again while a claim is not usable yet no other writer is known to hold it."""
        for attempt in range(1, CLAIM_ATTEMPTS + 1):
            opened = self._claim(region)
            if not isinstance(opened, MemwalError):
                return opened
            if attempt == CLAIM_ATTEMPTS:
                raise opened
            log.warning("%s (claim %d); claiming again", opened, attempt)
            time.sleep(0.1 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _verified_claim(self, region: str, native: dict[str, Any]) -> tuple[ShardWriter, Claim] | FencedError:
        """Lance's claim, and proof that it is the region's newest: one epoch past the one before it.

        A claim that another overlapped (or that stalled while others claimed
        and flushed) may have found the WAL's tip from a stale hint, in a slot
        GC freed; it is closed, and the error to raise if claiming again does
        not help is returned (`_open` claims again).
        """
        manifests = self.table.region_store(region)
        before = Claim.epoch_before(manifests)
        what = f"region {region}: claim"
        writer = _bounded(lambda: self._dataset.mem_wal_writer(region, **native), self.call_seconds, what)
        try:
            claim = Claim.verified(manifests, before)
        except MemwalError:
            self._close_quietly(region, writer)
            raise
        if claim is None:
            self._close_quietly(region, writer)
            return _fenced(region)
        return writer, claim

    def _close_quietly(self, region: str, writer: ShardWriter) -> None:
        """Close a native writer this one will not use; a failure is no news (it was fenced, or storage fails)."""
        with contextlib.suppress(OSError, RuntimeError, ValueError, UncertainWriteError):
            _bounded(writer.close, self.call_seconds, f"region {region}: close")

    def _claim(self, region: str) -> tuple[ShardWriter, Claim] | MemwalError:
        """One claim, or the error to raise if claiming again does not help; a WAL generation our limits
        cannot replay is replayed once with larger ones."""
        native = dict(self._native_options)
        what = f"region {region}: claim"
        try:
            return self._verified_claim(region, native)
        except (OSError, RuntimeError, ValueError) as exc:
            if is_memory_ceiling_refusal(exc) and self._bounded_memory:
                log.warning(
                    "region %s: its in-memory indexes need more room than memwal's MemTable memory "
                    "limits leave; this writer uses Lance's defaults",
                    region,
                )
                for key in self._bounded_memory:
                    self._native_options.pop(key, None)
                self._bounded_memory = {}
                return self._claim(region)
            if not is_overfull_replay(exc):
                return _claim_failure(region, exc)
        log.warning(
            "region %s: its WAL holds a generation over our MemTable limits; replaying it once", region
        )
        # Without memwal's memory limits: the index reserve of the larger limits would not fit under them.
        unbounded = {k: v for k, v in native.items() if k not in self._bounded_memory}
        for attempt, limits in enumerate(RECOVERY_LIMITS, start=1):
            options = {**unbounded, **limits}
            replay = functools.partial(self._dataset.mem_wal_writer, region, **options)
            try:
                _bounded(lambda: replay().close(), self.call_seconds, what)  # noqa: B023 (called at once)
                break
            except (OSError, RuntimeError, ValueError) as exc:
                if attempt == len(RECOVERY_LIMITS) or not is_overfull_replay(exc):
                    raise _native_error(region, exc) from None
        try:
            return self._verified_claim(region, native)
        except (OSError, RuntimeError, ValueError) as exc:
            return _claim_failure(region, exc)

    def _discard(self, region: str, error: MemwalError) -> None:
        """Forget a region's native writer after a failed write; a fenced one is never re-claimed.

        Any other failure leaves the region unsettled until a fresh claim: the
        writer given up may not have flushed what it acknowledged, and its
        close is not trusted (it is not even tried after a call that never
        returned, since it would wait for that call).
        """
        writer = self._writers.pop(region, None)
        self._claims.pop(region, None)
        if isinstance(error, FencedError):
            self._fenced.add(region)
            return
        self._unsettled.add(region)
        if writer is not None and not isinstance(error, UncertainWriteError):
            self._close_quietly(region, writer)

    def _write(self, kind: str, parts: dict[str, pa.Table]) -> None:
        """Each region's part through its writer (regions in parallel); the first error is raised."""
        for region in parts:
            if region in self._fenced:
                raise _fenced(region)

        def run(region: str) -> None:
            rows = parts[region]
            for start in range(0, rows.num_rows, self.chunk_rows):
                self._write_chunk(kind, region, rows.slice(start, self.chunk_rows))
            counters = self._counters[region]
            counters.calls += 1
            if kind == "put":
                counters.rows_put += rows.num_rows
            else:
                counters.rows_deleted += rows.num_rows

        for error in self._each(run, list(parts)):
            if error is not None:
                raise error

    def _each(self, task: Callable[[str], None], regions: list[str]) -> list[BaseException | None]:
        """`task(region)` for every region, in parallel threads; each one's error, or None."""
        if len(regions) == 1:
            try:
                task(regions[0])
            except Exception as exc:  # handed back like the pool's
                return [exc]
            return [None]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=REGION_THREADS, thread_name_prefix="memwal-writer")
        futures = [self._pool.submit(task, region) for region in regions]
        return [f.exception() for f in futures]

    def _write_chunk(self, kind: str, region: str, rows: pa.Table) -> None:
        """One chunk into a region, written again after a fresh claim while its outcome is uncertain.

        Rewriting is safe: puts and deletes are idempotent by key, and nothing
        else of this writer's reaches the region in between.
        """
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                writer = self._writer(region)
                write: Callable[[pa.Table], None] = getattr(writer, kind)
                try:
                    _bounded(functools.partial(write, rows), self.call_seconds, f"region {region}: {kind}")
                except (OSError, RuntimeError, ValueError) as exc:
                    raise _native_error(region, exc) from None
                claim = self._claims.get(region)
                if self._durable and claim is not None and claim.due():
                    claim.check()  # a later claim: the write may sit where no replay reads it
            except UncertainWriteError as error:
                self._discard(region, error)
                if attempt == WRITE_ATTEMPTS:
                    raise
                log.warning("%s; writing the chunk again after a fresh claim", error)
                continue
            except (FencedError, StorageError) as error:
                if region in self._writers:  # the write failed, not the claim
                    self._discard(region, error)
                raise
            return

    # -- API --------------------------------------------------------------

    def put(self, data: Any) -> int:
        """Upsert rows (anything Arrow-like); returns the rows written once acknowledged."""
        return self.put_all([data])

    def put_all(self, parts: Iterable[Any]) -> int:
        """Upsert a stream of Arrow-like parts, gathered into writes of about `chunk_rows` rows.

        Each durable write waits for a WAL flush, so many small parts cost far
        more written one by one. Every part is checked before it joins a write.
        """
        written = 0
        pending: list[pa.Table] = []
        pending_rows = 0
        for part in parts:
            for table in iter_tables(part):
                pending.append(conform(table, self.schema, what="put"))
                pending_rows += table.num_rows
                if pending_rows >= self.chunk_rows:
                    written += self._put_rows(pending)
                    pending, pending_rows = [], 0
        return written + self._put_rows(pending)

    def _put_rows(self, tables: list[pa.Table]) -> int:
        if not tables:
            return 0
        rows = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if rows.num_rows:
            self._write("put", self._split(rows))
        return int(rows.num_rows)

    def delete(self, keys: Any) -> int:
        """Delete rows by primary key (Arrow-like key columns, or a list of values for a one-column key)."""
        needed = list(
            dict.fromkeys(
                [*self.primary_key, *([self.spec.column] if self.spec and self.spec.column else [])]
            )
        )
        deleted = 0
        for table in key_rows(keys, self.primary_key):
            rows = conform(table, self.schema, required=needed, what="delete")
            if rows.num_rows:
                self._write("delete", self._split(rows))
                deleted += rows.num_rows
        return deleted

    def claim(self, region: str | None = None) -> str:
        """Claim a region now instead of at its first write (default: the pinned region).

        The claim replays the region's WAL and fences any older writer; a
        recovery tool claims and closes to make a crashed writer's
        acknowledged writes readable.
        """
        region = region or self._pinned
        if region is None:
            raise BadInputError("claim needs a region: this writer is not pinned to one")
        self._writer(region_id("claim() argument region", region))
        return region

    def flush(self) -> None:
        """Seal every open region's MemTable that holds rows as a flushed generation.

        Lance 14's writer flushes only when its MemTable fills or on close, and
        has no call that flushes and keeps the claim, so a region with rows not
        yet flushed is closed and re-claimed at its next write (a new epoch). A
        region with nothing to flush keeps its writer and its claim: one writer
        session stays one epoch there.
        """
        self._close_writers(only_unflushed=True)

    def _close_writers(self, *, only_unflushed: bool = False) -> None:
        """Close native writers (regions in parallel; each flushes), then settle given-up regions.

        `only_unflushed`: leave open the writers whose MemTables hold nothing.
        """
        closing: dict[str, tuple[ShardWriter, Claim, int | None]] = {}
        for region, writer in list(self._writers.items()):
            through = _flushed_through(writer)
            if only_unflushed and through is None:
                continue
            del self._writers[region]
            closing[region] = (writer, self._claims.pop(region), through)

        def close(region: str) -> None:
            writer, claim, through = closing[region]
            self._closed_stats[region] = self._merged_native_stats(region, writer)
            if not self._closed_flushed(region, writer, claim, through):
                log.warning(
                    "region %s: Lance's writer closed without flushing generation %d, which holds "
                    "acknowledged writes; claiming the region again to flush them from its WAL",
                    region,
                    (through or 1) - 1,
                )
                self._unsettled.add(region)

        errors = [e for e in self._each(close, sorted(closing)) if e is not None] if closing else []
        for region in sorted(self._unsettled - self._fenced):
            try:
                self._settle(region)
            except MemwalError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _closed_flushed(self, region: str, writer: ShardWriter, claim: Claim, through: int | None) -> bool:
        """Close a native writer; whether the region's manifest then covers all it held (`through`).

        Lance 14's close waits only for the flushes still being tried: a
        MemTable whose background flush gave up stays frozen, and close returns
        as if it were flushed (its rows are in the WAL only). So a close is
        believed only once the region's newest manifest has moved past the
        writer's generations. A failed close leaves the region unsettled, unless
        it failed because another writer claimed the region: that writer
        replays the WAL, so those rows are its to flush, and this one never
        claims the region again.
        """
        try:
            _bounded(writer.close, self.call_seconds, f"region {region}: close")
        except (OSError, RuntimeError, ValueError) as exc:
            error = _native_error(region, exc)
            # Fenced: the claimer replays the WAL; settling here would claim again and fence it.
            (self._fenced if isinstance(error, FencedError) else self._unsettled).add(region)
            raise error from None
        except UncertainWriteError:
            self._unsettled.add(region)
            raise
        if through is None:
            return True
        try:
            latest = claim.manifests.read_latest(claim.version)
        except MemwalError:
            self._unsettled.add(region)  # not known to be flushed
            raise
        if latest.current_generation >= through:
            return True
        if latest.writer_epoch > claim.epoch:
            self._fenced.add(region)
            raise FencedError(
                f"region {region}: another writer claimed the region (epoch {latest.writer_epoch}, this "
                f"writer's {claim.epoch}) before this writer's acknowledged writes were flushed; they are "
                "in the WAL, which that writer replays"
            )
        return False

    def _settle(self, region: str) -> None:
        """Claim (replaying the WAL a given-up writer left) and close (flushing it) one region."""
        log.info("region %s: re-claiming to flush what a failed writer acknowledged", region)
        writer = self._writer(region)
        del self._writers[region]
        claim = self._claims.pop(region)
        try:
            flushed = self._closed_flushed(region, writer, claim, _flushed_through(writer))
        except UncertainWriteError:
            raise
        except StorageError as exc:
            raise StorageError(
                f"region {region}: acknowledged writes are in its WAL but could not be flushed "
                f"({exc}); the region's next claim replays them"
            ) from None
        if not flushed:
            self._unsettled.add(region)
            raise StorageError(
                f"region {region}: acknowledged writes are in its WAL but Lance's writer closed again "
                "without flushing them; the region's next claim replays them"
            )

    def _merged_native_stats(self, region: str, writer: ShardWriter | None) -> dict[str, Any]:
        totals = dict(self._closed_stats.get(region, {}))
        if writer is not None:
            for key, value in writer.stats().items():
                totals[key] = totals.get(key, 0) + value if isinstance(value, (int, float)) else value
        return totals

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per region: rows put and deleted, calls, and Lance's own writer statistics summed over claims."""
        return {
            region: {**asdict(counters), **self._merged_native_stats(region, self._writers.get(region))}
            for region, counters in sorted(self._counters.items())
        }

    @property
    def throttled(self) -> Throttled:
        """The store's "slow down" answers to this writer's own requests since it opened, and the seconds
        they waited (Lance's writer retries its requests inside Lance, unseen)."""
        return self.table.store.stats.throttling.lifetime()

    @property
    def regions(self) -> list[str]:
        """Regions this writer has written to."""
        return sorted(self._counters)

    def close(self) -> None:
        """Flush and close every region's writer."""
        try:
            self._close_writers()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def __enter__(self) -> MemWalWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # already failing: report that error, not a second one from closing
            self.close()
        except MemwalError as close_error:
            log.warning("closing the writer after an error also failed: %s", close_error)
