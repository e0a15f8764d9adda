"""Objects under a prefix of a cloud bucket or container (S3, Azure Blob Storage, GCS), through obstore.

obstore is Rust's object_store (the client Lance itself uses) with Python
bindings: signing, HTTP and XML parsing run in Rust with the GIL released,
about a third of the CPU per request of the hand-written SigV4 client over
urllib3 it replaced (docs/width.md, "CPU per request"). Its own retries are
off: memwal's `RetryPolicy` decides, so a conditional put whose answer was
lost is settled by reading the object back, never by a blind second put. A
throttled request is retried within `client_retry_timeout` without honouring
`Retry-After`: object_store keeps only a failed response's status and body
(`RetryError`), so its headers never reach Python.

What differs by store (signing, a container's name, how a lost race is
answered, batch deletes) lives in `s3.py`, `azure.py` and `gcs.py`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any, ClassVar, TypeVar

import obstore

from memwal_core.errors import AlreadyExistsError, ClockSkewError, NotFoundError, StorageError
from memwal_core.storage.limits import TimeLimits
from memwal_core.storage.object_store import ObjectInfo, ObjectStore, start_io_threads
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, USER_AGENT, StorageOptions
from memwal_core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore import ObjectMeta
    from obstore.store import ClientConfig, RetryConfig
    from obstore.store import ObjectStore as ObstoreClient

T = TypeVar("T")

# Error codes worth another attempt (with any 5xx status): S3's, and Azure's busy server.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "Throttling",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
        "ServerBusy",
        "OperationTimedOut",
    }
)
# What a store says when it wants fewer requests (with 503 or 429): retried within the time budget.
THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded", "ServerBusy"}
)
THROTTLE_STATUSES = frozenset({429, 503})
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]+)</Code>")
# What obstore raises for a failed request (a missing object is Python's own FileNotFoundError).
_OBSTORE_ERRORS = (obstore.exceptions.BaseError, FileNotFoundError)
# What obstore raises for a missing object (a 404 may also come as another error with its status).
_MISSING = (FileNotFoundError, obstore.exceptions.NotFoundError)
# Keys a listing takes at a time (S3's page); a listing that may stop early takes them a page at a time.
_PAGE = 1000
# Bytes a download asks for at a time.
_CHUNK = 8 << 20


class _Failure:
    """What an obstore error says: a status and error code, or a transport failure (none)."""

    def __init__(self, exc: BaseException, *, conflict_is_transient: bool) -> None:
        text = str(exc)
        status = _STATUS.search(text)
        code = _CODE.search(text)
        self.status = int(status.group(1)) if status else None
        self.code = code.group(1) if code else ""
        self.not_found = isinstance(exc, _MISSING) or self.status == 404
        self.exists = isinstance(
            exc, obstore.exceptions.AlreadyExistsError | obstore.exceptions.PreconditionError
        )
        self.denied = self.status in (401, 403) or isinstance(
            exc, obstore.exceptions.PermissionDeniedError | obstore.exceptions.UnauthenticatedError
        )
        # A generic error with no status: the request or its answer was lost on the way (refused,
        # reset, timed out). Any other kind (an invalid path) is no fault of the network.
        self.transport = self.status is None and type(exc) is obstore.exceptions.GenericError
        self.timed_out = self.transport and "TimedOut" in text
        self.kind = type(exc).__name__
        self._conflict_is_transient = conflict_is_transient

    @property
    def throttled(self) -> bool:
        """The store asked for fewer requests (S3's `503 SlowDown`, a `429`): it will answer later."""
        return self.code in THROTTLE_CODES or self.status in THROTTLE_STATUSES

    @property
    def transient(self) -> bool:
        return (
            self.transport
            or self.throttled
            or self.code in TRANSIENT_CODES
            or (self.status or 0) >= 500
            or (self.status == 409 and self._conflict_is_transient)
        )

    def name(self) -> str:
        return self.code or (str(self.status) if self.status else self.kind)


class _Runtime:
    """obstore's runtime (Rust threads) starts with the first request and does not survive a fork: a
    child forked after it hung on its first request. Such a child fails at once instead."""

    started = False
    forked_after_start = False

    @classmethod
    def check(cls) -> None:
        if cls.forked_after_start:
            raise StorageError(
                "this process was forked after it made storage requests, and obstore's runtime does not "
                "survive a fork: start worker processes with spawn (or fork before the first request)"
            )
        cls.started = True

    @classmethod
    def after_fork_in_child(cls) -> None:
        cls.forked_after_start = cls.started


os.register_at_fork(after_in_child=_Runtime.after_fork_in_child)


def client_options(
    options: StorageOptions, limits: TimeLimits, pool: int, *, allow_http: bool
) -> ClientConfig:
    """The HTTP client's settings, the same for every store: memwal's time limits, a connection per thread."""
    return {
        "allow_http": allow_http,
        "timeout": timedelta(seconds=limits.request),
        "connect_timeout": timedelta(seconds=limits.connect),
        "pool_max_idle_per_host": str(pool),
        **({"user_agent": agent} if (agent := options.get(USER_AGENT)) else {}),
    }


def retry_config(limits: TimeLimits) -> RetryConfig:
    """obstore's own retries off: `RetryPolicy` decides (see the module's note)."""
    return {"max_retries": 0, "retry_timeout": timedelta(seconds=limits.total)}


class CloudStore(ObjectStore):
    """A prefix in a cloud bucket or container; subclasses build the client and say how their store differs."""

    # For messages: the store's name, what it calls a bucket, and the error codes of a missing one.
    service: ClassVar[str]
    container_word: ClassVar[str] = "bucket"
    missing_container_codes: ClassVar[frozenset[str]] = frozenset({"NoSuchBucket"})
    # Whether a 409 is worth another attempt (S3's ConditionalRequestConflict); on Azure a 409 is the
    # answer to a conditional put that lost its race (BlobAlreadyExists), final.
    conflict_is_transient: ClassVar[bool] = False
    # Keys one batch delete takes (S3's DeleteObjects 1,000, Azure's blob batch 256); 1: none, one DELETE each.
    delete_batch: ClassVar[int] = 1

    def __init__(
        self,
        uri: str,
        container: str,
        client: ObstoreClient,
        *,
        limits: TimeLimits,
        endpoint: str | None,
        parallelism: int = DEFAULT_CONCURRENT_REQUESTS,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(uri, parallelism=parallelism)
        self.container = container
        self.limits = limits
        # No attempt starts that could end after the total limit.
        self.retry = retry or RetryPolicy(deadline=limits.total, attempt_limit=limits.request)
        self.endpoint = endpoint
        self._client = client
        start_io_threads(parallelism)

    def _call(self, kind: str, path: str, call: Callable[[], T]) -> T:
        """One request, retried while its failure is transient; obstore's errors become memwal's (never quoted:
        they hold the request URL, and an endpoint's user info)."""

        _Runtime.check()

        def attempt() -> T:
            self.stats.add(kind)
            return call()

        try:
            return self.retry.run(
                attempt,
                lambda exc: isinstance(exc, _OBSTORE_ERRORS) and self._failure(exc).transient,
                is_throttled=lambda exc: isinstance(exc, _OBSTORE_ERRORS) and self._failure(exc).throttled,
                clock=self.stats.throttling,
            )
        except _OBSTORE_ERRORS as exc:
            raise self._error(kind, path, self._failure(exc)) from None

    def _failure(self, exc: BaseException) -> _Failure:
        return _Failure(exc, conflict_is_transient=self.conflict_is_transient)

    def _error(self, kind: str, path: str, failure: _Failure) -> Exception:
        where = self.describe(path)
        if failure.code in self.missing_container_codes:
            return NotFoundError(f"{self.container_word} {self.container!r} does not exist")
        if failure.not_found:
            return NotFoundError(f"{where} does not exist")
        if failure.exists:
            return AlreadyExistsError(f"{where} already exists")
        if failure.code == "RequestTimeTooSkewed":
            return ClockSkewError(
                f"{self.endpoint or self.service} refused {kind} of {where}: this host's clock is off the store's "
                f"by more than its request-signing window (15 minutes on S3): set this host's clock (NTP) and "
                f"run again"
            )
        if failure.denied:
            return StorageError(f"access to {where} denied ({failure.name()})")
        endpoint = self.endpoint or self.service
        if failure.throttled:
            return StorageError(
                f"{kind} of {where} failed: {endpoint} still asked to slow down ({failure.name()}) when "
                f"its {self.limits.total:g} s of retries ran out (storage option client_retry_timeout)"
            )
        if failure.timed_out:
            return StorageError(
                f"storage did not answer: {endpoint} gave no full reply for {where} within "
                f"{self.limits.request:g} s (storage option timeout)"
            )
        if failure.transport:
            return StorageError(f"cannot reach {endpoint} for {where}")
        return StorageError(f"{kind} of {where} failed ({failure.name()})")

    def read(self, path: str) -> bytes:
        return self._call("get", path, lambda: obstore.get(self._client, path).bytes().to_bytes())

    def read_into(self, path: str, target: IO[bytes]) -> None:
        """The object's bytes written to `target` a chunk at a time (a retry starts over): memory stays flat."""

        def download() -> None:
            target.seek(0)
            target.truncate()
            for chunk in obstore.get(self._client, path).stream(min_chunk_size=_CHUNK):
                target.write(chunk)

        self._call("get", path, download)
        target.flush()

    def write(self, path: str, data: bytes) -> None:
        self._call("put", path, lambda: obstore.put(self._client, path, data))

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        attempts = 0

        def call() -> None:
            nonlocal attempts
            attempts += 1
            obstore.put(self._client, path, data, mode="create")

        try:
            self._call("put_if_not_exists", path, call)
        except AlreadyExistsError:
            # A retried put whose first attempt landed (but whose answer was lost)
            # sees its own object: that is a success, not a lost race.
            if attempts > 1 and self.read(path) == data:
                return
            raise

    def head(self, path: str) -> ObjectInfo | None:
        def probe() -> ObjectMeta | None:
            # A miss is the common answer (the probe past a region's latest version): answered here,
            # without the error path's parsing and message redaction, which cost more than the request.
            try:
                return obstore.head(self._client, path)
            except _MISSING:
                return None

        try:
            meta = self._call("head", path, probe)
        except NotFoundError:  # a 404 obstore reports another way
            return None
        return ObjectInfo(path, meta["size"], meta["last_modified"].timestamp()) if meta is not None else None

    def is_dir(self, path: str) -> bool:
        def first_page() -> bool:
            return any(len(chunk) > 0 for chunk in obstore.list(self._client, path or None, chunk_size=1))

        return self._call("list", path, first_page)

    def check_reachable(self) -> None:
        # One level, not `is_dir`'s recursive page: that walks the whole tree below the table on some
        # stores (60 ms on SeaweedFS at 1,000 regions). A one-level listing is no answer to `is_dir`
        # there: SeaweedFS lists a directory emptied of its objects as a common prefix.
        self._call("list", "", lambda: obstore.list_with_delimiter(self._client, None))

    def list_dirs(self, path: str) -> list[str]:
        found = self._call("list", path, lambda: obstore.list_with_delimiter(self._client, path or None))
        return sorted(p.rsplit("/", 1)[-1] for p in found["common_prefixes"])

    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None, enough: str | None = None
    ) -> list[ObjectInfo]:
        stop = enough or before

        def listed() -> list[ObjectInfo]:
            if not recursive:
                metas = obstore.list_with_delimiter(self._client, path or None)["objects"]
                return [_info(meta) for meta in metas if before is None or meta["path"] < before]
            found: list[ObjectInfo] = []
            for chunk in obstore.list(self._client, path or None, chunk_size=_PAGE):
                found += (_info(meta) for meta in chunk if before is None or meta["path"] < before)
                if stop is not None and chunk and chunk[-1]["path"] >= stop:
                    break  # every store lists in key order: the rest sorts after `stop`, and is never asked for
            return found

        return sorted(self._call("list", path, listed), key=lambda info: info.path)

    def first_files(self, path: str) -> list[ObjectInfo]:
        """The first page (1,000 keys) below `path`, one LIST: Lance's table manifests sort newest first."""

        def page() -> list[ObjectInfo]:
            found = next(iter(obstore.list(self._client, path or None, chunk_size=_PAGE)), [])
            return [_info(meta) for meta in found if "/" not in meta["path"][len(path) + 1 :]]

        return sorted(self._call("list", path, page), key=lambda info: info.path)

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: self._deleted(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        """Batch deletes of up to `delete_batch` keys, batches in parallel; without batches, one DELETE each."""
        if self.delete_batch == 1:
            self.map(self.delete, paths)
            return
        batches = [list(paths[i : i + self.delete_batch]) for i in range(0, len(paths), self.delete_batch)]
        self.map(self._delete_batch, batches)

    def _delete_batch(self, batch: list[str]) -> None:
        if not self._call("delete_many", batch[0], lambda: self._deleted(batch)):
            # A store that reports a missing key in a batch (Azure) stops at the first: the keys after
            # it may be left. Each again on its own, where a missing one is no error.
            self.map(self.delete, batch)

    def _deleted(self, paths: str | list[str]) -> bool:
        """Delete; False if the store said an object was missing (S3 deletes those silently, Azure and GCS
        answer 404), which is no error. A missing bucket or container is."""
        try:
            obstore.delete(self._client, paths)
        except _MISSING as exc:
            if self._failure(exc).code in self.missing_container_codes:
                raise
            return False
        return True


def _info(meta: Any) -> ObjectInfo:
    return ObjectInfo(meta["path"], meta["size"], meta["last_modified"].timestamp())
