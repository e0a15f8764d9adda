"""Objects under a prefix of an S3 bucket (AWS or any S3-compatible server), through obstore.

obstore is Rust's object_store (the client Lance itself uses) with Python
bindings: signing, HTTP and XML parsing run in Rust with the GIL released,
about a third of the CPU per request of the hand-written SigV4 client over
urllib3 it replaced (docs/width.md, "CPU per request"). Its own retries are
off: memwal's `RetryPolicy` decides, so a conditional put whose answer was
lost is settled by reading the object back, never by a blind second put. A
throttled request is retried within `client_retry_timeout` without honouring
`Retry-After`: object_store keeps only a failed response's status and body
(`RetryError`), so its headers never reach Python.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import obstore

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.limits import TimeLimits
from memwal_core.storage.object_store import ObjectInfo, ObjectStore, join_path, start_io_threads
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, USER_AGENT, StorageOptions
from memwal_core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore import ObjectMeta
    from obstore.store import S3Config, S3Credential

T = TypeVar("T")

# Error codes worth another attempt (with any 5xx status).
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "Throttling",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
    }
)
# What a store says when it wants fewer requests (with 503 or 429): retried within the time budget.
THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded"}
)
THROTTLE_STATUSES = frozenset({429, 503})
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]+)</Code>")
# How long a credential from botocore's chain is used before it is asked again (it refreshes its own).
_CREDENTIAL_SECONDS = 300.0
# What obstore raises for a failed request (a missing object is Python's own FileNotFoundError).
_OBSTORE_ERRORS = (obstore.exceptions.BaseError, FileNotFoundError)
# What obstore raises for a missing object (a 404 may also come as another error with its status).
_MISSING = (FileNotFoundError, obstore.exceptions.NotFoundError)
# Keys listed per page by S3; a listing that may stop early takes them a page at a time.
_PAGE = 1000


class _Failure:
    """What an obstore error says: an S3 status and error code, or a transport failure (none)."""

    def __init__(self, exc: BaseException) -> None:
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
            or self.status == 409
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
                "this process was forked after it made S3 requests, and obstore's runtime does not survive "
                "a fork: start worker processes with spawn (or fork before the first request)"
            )
        cls.started = True

    @classmethod
    def after_fork_in_child(cls) -> None:
        cls.forked_after_start = cls.started


os.register_at_fork(after_in_child=_Runtime.after_fork_in_child)


class _BotocoreCredentials:
    """Credentials from botocore's chain (profiles, SSO, containers, instance roles) for obstore to sign with."""

    def __init__(self, found: Any) -> None:
        self._found = found

    def __call__(self) -> S3Credential:
        frozen = self._found.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(UTC) + timedelta(seconds=_CREDENTIAL_SECONDS),
        }


def _signing(options: StorageOptions) -> tuple[S3Config, _BotocoreCredentials | None]:
    """Keys from the options or the environment; else botocore's chain (imported only then: object_store
    reads no profile files); else unsigned requests, as before."""
    key = options.first("aws_access_key_id", "access_key_id", env=("AWS_ACCESS_KEY_ID",))
    secret = options.first("aws_secret_access_key", "secret_access_key", env=("AWS_SECRET_ACCESS_KEY",))
    if key and secret:
        config: S3Config = {"access_key_id": key, "secret_access_key": secret}
        token = options.first(
            "aws_session_token", "session_token", "aws_token", "token", env=("AWS_SESSION_TOKEN",)
        )
        if token:
            config["session_token"] = token
        return config, None
    import botocore.session

    found = botocore.session.get_session().get_credentials()
    return ({"skip_signature": True}, None) if found is None else ({}, _BotocoreCredentials(found))


def _client(
    bucket: str, prefix: str, options: StorageOptions, endpoint: str | None, pool: int, limits: TimeLimits
) -> obstore.store.S3Store:
    config, provider = _signing(options)
    config["region"] = (
        options.first("aws_region", "region", env=("AWS_REGION", "AWS_DEFAULT_REGION")) or "us-east-1"
    )
    config["virtual_hosted_style_request"] = options.flag(
        "aws_virtual_hosted_style_request", default=endpoint is None
    )
    if endpoint:
        config["endpoint"] = endpoint
    return obstore.store.S3Store(
        bucket,
        prefix=prefix or None,
        config=config,
        credential_provider=provider,
        client_options={
            "allow_http": options.flag("allow_http") or (endpoint or "").startswith("http://"),
            "timeout": timedelta(seconds=limits.request),
            "connect_timeout": timedelta(seconds=limits.connect),
            "pool_max_idle_per_host": str(pool),
            **({"user_agent": agent} if (agent := options.get(USER_AGENT)) else {}),
        },
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=limits.total)},
    )


class S3Store(ObjectStore):
    """A prefix in an S3 bucket (AWS or any S3-compatible server)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        options: StorageOptions,
        *,
        parallelism: int = DEFAULT_CONCURRENT_REQUESTS,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(f"s3://{join_path(bucket, prefix)}", parallelism=parallelism)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.limits = options.time_limits()
        # No attempt starts that could end after the total limit.
        self.retry = retry or RetryPolicy(deadline=self.limits.total, attempt_limit=self.limits.request)
        endpoint = options.first(
            "aws_endpoint",
            "endpoint",
            env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        )
        if endpoint and not endpoint.startswith(("http://", "https://")):
            scheme = "http" if options.flag("allow_http") else "https"
            endpoint = f"{scheme}://{endpoint}"
        self.endpoint = endpoint
        self._s3 = _client(bucket, self.prefix, options, endpoint, parallelism, self.limits)
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
                lambda exc: isinstance(exc, _OBSTORE_ERRORS) and _Failure(exc).transient,
                is_throttled=lambda exc: isinstance(exc, _OBSTORE_ERRORS) and _Failure(exc).throttled,
                clock=self.stats.throttling,
            )
        except _OBSTORE_ERRORS as exc:
            raise self._error(kind, path, _Failure(exc)) from None

    def _error(self, kind: str, path: str, failure: _Failure) -> Exception:
        where = self.describe(path)
        if failure.code == "NoSuchBucket":
            return NotFoundError(f"bucket {self.bucket!r} does not exist")
        if failure.not_found:
            return NotFoundError(f"{where} does not exist")
        if failure.exists:
            return AlreadyExistsError(f"{where} already exists")
        if failure.denied:
            return StorageError(f"access to {where} denied ({failure.name()})")
        endpoint = self.endpoint or "S3"
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
        return self._call("get", path, lambda: obstore.get(self._s3, path).bytes().to_bytes())

    def write(self, path: str, data: bytes) -> None:
        self._call("put", path, lambda: obstore.put(self._s3, path, data))

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        attempts = 0

        def call() -> None:
            nonlocal attempts
            attempts += 1
            obstore.put(self._s3, path, data, mode="create")

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
                return obstore.head(self._s3, path)
            except _MISSING:
                return None

        try:
            meta = self._call("head", path, probe)
        except NotFoundError:  # a 404 obstore reports another way
            return None
        return ObjectInfo(path, meta["size"], meta["last_modified"].timestamp()) if meta is not None else None

    def is_dir(self, path: str) -> bool:
        def first_page() -> bool:
            return any(len(chunk) > 0 for chunk in obstore.list(self._s3, path or None, chunk_size=1))

        return self._call("list", path, first_page)

    def check_reachable(self) -> None:
        # One level, not `is_dir`'s recursive page: that walks the whole tree below the table on some
        # stores (60 ms on SeaweedFS at 1,000 regions). A one-level listing is no answer to `is_dir`
        # there: SeaweedFS lists a directory emptied of its objects as a common prefix.
        self._call("list", "", lambda: obstore.list_with_delimiter(self._s3, None))

    def list_dirs(self, path: str) -> list[str]:
        found = self._call("list", path, lambda: obstore.list_with_delimiter(self._s3, path or None))
        return sorted(p.rsplit("/", 1)[-1] for p in found["common_prefixes"])

    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None, enough: str | None = None
    ) -> list[ObjectInfo]:
        stop = enough or before

        def listed() -> list[ObjectInfo]:
            if not recursive:
                metas = obstore.list_with_delimiter(self._s3, path or None)["objects"]
                return [_info(meta) for meta in metas if before is None or meta["path"] < before]
            found: list[ObjectInfo] = []
            for chunk in obstore.list(self._s3, path or None, chunk_size=_PAGE):
                found += (_info(meta) for meta in chunk if before is None or meta["path"] < before)
                if stop is not None and chunk and chunk[-1]["path"] >= stop:
                    break  # S3 lists in key order: the rest sorts after `stop`, and is never asked for
            return found

        return sorted(self._call("list", path, listed), key=lambda info: info.path)

    def first_files(self, path: str) -> list[ObjectInfo]:
        """The first page (1,000 keys) below `path`, one LIST: Lance's table manifests sort newest first."""

        def page() -> list[ObjectInfo]:
            found = next(iter(obstore.list(self._s3, path or None, chunk_size=_PAGE)), [])
            return [_info(meta) for meta in found if "/" not in meta["path"][len(path) + 1 :]]

        return sorted(self._call("list", path, page), key=lambda info: info.path)

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: obstore.delete(self._s3, path))

    def delete_many(self, paths: Sequence[str]) -> None:
        """DeleteObjects requests of up to 1,000 keys (S3's batch limit), batches in parallel."""
        batches = [list(paths[i : i + _PAGE]) for i in range(0, len(paths), _PAGE)]
        self.map(
            lambda batch: self._call("delete_many", batch[0], lambda: obstore.delete(self._s3, batch)),
            batches,
        )

    def delete_trees(self, paths: Sequence[str]) -> list[list[ObjectInfo]]:
        found = [self.list_files(path, recursive=True) for path in paths]
        keys: list[str] = []
        for path, tree in zip(paths, found, strict=True):
            files = [info.path for info in tree]
            # Some S3 servers (SeaweedFS) keep emptied folders as listable prefixes unless their
            # folder keys are deleted too (deepest first); on AWS these keys are absent and cost nothing.
            folders = {path} | {f.rsplit("/", 1)[0] for f in files}
            for folder in list(folders):
                while folder.startswith(f"{path}/"):
                    folder = folder.rsplit("/", 1)[0]
                    folders.add(folder)
            keys += files + sorted(folders, key=lambda f: -f.count("/"))
        self.delete_many(keys)
        return found


def _info(meta: Any) -> ObjectInfo:
    return ObjectInfo(meta["path"], meta["size"], meta["last_modified"].timestamp())
