"""One object-store interface over local files and S3.

Everything memwal reads or writes outside Lance's own calls goes through
here: region manifests, WAL entries, table manifests. The two operations the
MemWAL protocol depends on are `put_if_not_exists` (atomic: exactly one of
many racing writers wins, and no reader ever sees a partial object) and
`exists` (a HEAD, so reading the latest region manifest never LISTs).
"""

from __future__ import annotations

import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import urllib3

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.retry import RetryPolicy
from memwal_core.storage.s3_http import S3HttpError, SignedHttp

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ObjectInfo:
    """A stored object: its path relative to the store root, size and modification time."""

    path: str
    size: int
    mtime: float


class RequestStats:
    """Thread-safe count of storage requests by kind, for benchmarks and metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


class ObjectStore(ABC):
    """Objects under one root (a table directory), addressed by relative '/'-paths."""

    def __init__(self, uri: str, *, parallelism: int) -> None:
        self.uri = uri.rstrip("/")
        self.stats = RequestStats()
        self.parallelism = parallelism
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Apply `fn` to items concurrently (I/O-bound), keeping their order."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.parallelism, thread_name_prefix="memwal-io")
        return list(self._pool.map(fn, items))

    def exists_many(self, paths: Sequence[str]) -> list[bool]:
        """Existence of many objects, probed in parallel."""
        return self.map(self.exists, paths)

    def describe(self, path: str) -> str:
        """The full URI of `path`, for messages."""
        return f"{self.uri}/{path}" if path else self.uri

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The object's bytes; NotFoundError if absent."""

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace the object."""

    @abstractmethod
    def put_if_not_exists(self, path: str, data: bytes) -> None:
        """Create the object atomically; AlreadyExistsError if it exists."""

    @abstractmethod
    def head(self, path: str) -> ObjectInfo | None:
        """The object's size and mtime, or None if absent."""

    def exists(self, path: str) -> bool:
        """Whether the object exists (one HEAD request)."""
        return self.head(path) is not None

    @abstractmethod
    def is_dir(self, path: str) -> bool:
        """Whether anything is stored below `path/`."""

    @abstractmethod
    def list_dirs(self, path: str) -> list[str]:
        """Names of the immediate sub-directories of `path`, sorted."""

    @abstractmethod
    def list_files(self, path: str, *, recursive: bool = False) -> list[ObjectInfo]:
        """Objects below `path` (immediate children unless `recursive`), sorted by path."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one object; deleting an absent object is not an error."""

    def close(self) -> None:
        """Release the I/O threads."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


class LocalStore(ObjectStore):
    """A directory on the local file system."""

    def __init__(self, root: Path, *, parallelism: int = 16) -> None:
        super().__init__(str(root), parallelism=parallelism)
        self.root = root

    def _path(self, path: str) -> Path:
        return self.root / path if path else self.root

    def _io(self, kind: str, path: str, call: Callable[[], T]) -> T:
        self.stats.add(kind)
        try:
            return call()
        except FileNotFoundError as exc:
            raise NotFoundError(f"{self.describe(path)} does not exist") from exc
        except FileExistsError:
            raise
        except OSError as exc:
            raise StorageError(f"{kind} of {self.describe(path)} failed: {exc.strerror}") from exc

    def read(self, path: str) -> bytes:
        return self._io("get", path, self._path(path).read_bytes)

    def write(self, path: str, data: bytes) -> None:
        def call() -> None:
            target = self._path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)

        self._io("put", path, call)

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        # Write a private temp file, then hard-link it into place: link() fails
        # if the name exists, so exactly one racer wins and no reader sees a
        # half-written file.
        def call() -> None:
            target = self._path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            try:
                os.link(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)

        try:
            self._io("put_if_not_exists", path, call)
        except FileExistsError as exc:
            raise AlreadyExistsError(f"{self.describe(path)} already exists") from exc

    def head(self, path: str) -> ObjectInfo | None:
        try:
            st = self._io("head", path, self._path(path).stat)
        except NotFoundError:
            return None
        return ObjectInfo(path, st.st_size, st.st_mtime)

    def is_dir(self, path: str) -> bool:
        self.stats.add("head")
        return self._path(path).is_dir()

    def list_dirs(self, path: str) -> list[str]:
        def call() -> list[str]:
            return sorted(e.name for e in os.scandir(self._path(path)) if e.is_dir())

        try:
            return self._io("list", path, call)
        except NotFoundError:
            return []

    def list_files(self, path: str, *, recursive: bool = False) -> list[ObjectInfo]:
        base = self._path(path)

        def call() -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            walker = os.walk(base) if recursive else [(str(base), [], os.listdir(base))]
            for dirpath, _dirs, files in walker:
                for name in files:
                    full = Path(dirpath) / name
                    if not full.is_file() or name.endswith(".tmp"):
                        continue
                    st = full.stat()
                    rel = full.relative_to(self.root).as_posix()
                    found.append(ObjectInfo(rel, st.st_size, st.st_mtime))
            return sorted(found, key=lambda info: info.path)

        try:
            return self._io("list", path, call)
        except NotFoundError:
            return []

    def delete(self, path: str) -> None:
        self._io("delete", path, lambda: self._path(path).unlink(missing_ok=True))


class S3Store(ObjectStore):
    """A prefix in an S3 bucket (AWS or any S3-compatible server)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        options: StorageOptions,
        *,
        parallelism: int = 64,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(f"s3://{_join(bucket, prefix)}", parallelism=parallelism)
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.retry = retry or RetryPolicy()
        endpoint = options.first(
            "aws_endpoint",
            "endpoint",
            env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        )
        if endpoint and not endpoint.startswith(("http://", "https://")):
            scheme = "http" if options.flag("allow_http") else "https"
            endpoint = f"{scheme}://{endpoint}"
        self.endpoint = endpoint
        virtual = options.flag("aws_virtual_hosted_style_request", default=endpoint is None)
        session = boto3.session.Session(
            aws_access_key_id=options.first("aws_access_key_id", "access_key_id"),
            aws_secret_access_key=options.first("aws_secret_access_key", "secret_access_key"),
            aws_session_token=options.first("aws_session_token", "session_token"),
            region_name=options.first("aws_region", "region", env=("AWS_REGION", "AWS_DEFAULT_REGION"))
            or "us-east-1",
        )
        self._http = SignedHttp(
            session, endpoint, bucket, region=session.region_name, virtual=virtual, pool_size=parallelism
        )
        self._client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                # Our RetryPolicy owns retries, so it can tell "already exists" apart.
                retries={"max_attempts": 1, "mode": "standard"},
                max_pool_connections=parallelism,
                connect_timeout=5,
                read_timeout=30,
                s3={"addressing_style": "virtual" if virtual else "path"},
            ),
        )

    def _key(self, path: str) -> str:
        return _join(self.prefix, path)

    @staticmethod
    def _code(exc: BaseException) -> str:
        if isinstance(exc, S3HttpError):
            return exc.code
        response = getattr(exc, "response", None) or {}
        error = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(error.get("Code") or status or "")

    def _is_transient(self, exc: BaseException) -> bool:
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

        if isinstance(exc, ConnectionError | HTTPClientError | urllib3.exceptions.HTTPError):
            return True
        if isinstance(exc, ClientError | S3HttpError):
            code = self._code(exc)
            if code in (
                "SlowDown",
                "RequestTimeout",
                "Throttling",
                "InternalError",
                "ServiceUnavailable",
                "ConditionalRequestConflict",
                "409",
            ):
                return True
            return code.isdigit() and int(code) >= 500
        return False

    def _call(self, kind: str, path: str, call: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        def attempt() -> T:
            self.stats.add(kind)
            return call()

        try:
            return self.retry.run(attempt, self._is_transient)
        except (ClientError, S3HttpError) as exc:
            code = self._code(exc)
            if code in ("404", "NoSuchKey", "NotFound"):
                raise NotFoundError(f"{self.describe(path)} does not exist") from exc
            if code == "NoSuchBucket":
                raise NotFoundError(f"bucket {self.bucket!r} does not exist") from exc
            if code in ("412", "PreconditionFailed"):
                raise AlreadyExistsError(f"{self.describe(path)} already exists") from exc
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise StorageError(f"access to {self.describe(path)} denied ({code})") from exc
            raise StorageError(f"{kind} of {self.describe(path)} failed ({code})") from exc
        except (BotoCoreError, urllib3.exceptions.HTTPError) as exc:
            where = self.endpoint or "S3"
            raise StorageError(
                f"cannot reach {where} for {self.describe(path)}: {type(exc).__name__}"
            ) from exc

    def read(self, path: str) -> bytes:
        return self._call("get", path, lambda: self._http.request("GET", self._key(path)).data)

    def write(self, path: str, data: bytes) -> None:
        self._call(
            "put",
            path,
            lambda: self._http.request("PUT", self._key(path), data),
        )

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        attempts = 0

        def call() -> None:
            nonlocal attempts
            attempts += 1
            self._http.request("PUT", self._key(path), data, {"If-None-Match": "*"})

        try:
            self._call("put_if_not_exists", path, call)
        except AlreadyExistsError:
            # A retried put whose first attempt landed (but whose reply was lost)
            # sees its own object: that is a success, not a lost race.
            if attempts > 1 and self.read(path) == data:
                return
            raise

    def head(self, path: str) -> ObjectInfo | None:
        try:
            response = self._call("head", path, lambda: self._http.request("HEAD", self._key(path)))
        except NotFoundError:
            return None
        return ObjectInfo(path, int(response.headers.get("content-length", 0)), response.last_modified)

    def _pages(self, path: str, *, delimiter: bool) -> Iterable[dict[str, object]]:
        prefix = self._key(path)
        prefix = f"{prefix}/" if prefix else ""
        token: str | None = None
        while True:
            kwargs: dict[str, object] = {"Bucket": self.bucket, "Prefix": prefix}
            if delimiter:
                kwargs["Delimiter"] = "/"
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("list", path, lambda kw=kwargs: self._client.list_objects_v2(**kw))  # type: ignore[misc]
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    def is_dir(self, path: str) -> bool:
        prefix = self._key(path)
        page = self._call(
            "list",
            path,
            lambda: self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1
            ),
        )
        return bool(page.get("KeyCount"))

    def list_dirs(self, path: str) -> list[str]:
        names: list[str] = []
        for page in self._pages(path, delimiter=True):
            for entry in page.get("CommonPrefixes", []) or []:  # type: ignore[attr-defined]
                names.append(entry["Prefix"].rstrip("/").rsplit("/", 1)[-1])
        return sorted(names)

    def list_files(self, path: str, *, recursive: bool = False) -> list[ObjectInfo]:
        found: list[ObjectInfo] = []
        for page in self._pages(path, delimiter=not recursive):
            for obj in page.get("Contents", []) or []:  # type: ignore[attr-defined]
                found.append(
                    ObjectInfo(
                        self._relative(obj["Key"]),
                        int(obj["Size"]),
                        obj["LastModified"].timestamp(),
                    )
                )
        return sorted(found, key=lambda info: info.path)

    def delete(self, path: str) -> None:
        self._call(
            "delete",
            path,
            lambda: self._client.delete_object(Bucket=self.bucket, Key=self._key(path)),
        )


def open_store(uri: str, options: StorageOptions | None = None) -> ObjectStore:
    """The store for a table URI: a local path, `file://...` or `s3://bucket/prefix`."""
    options = options or StorageOptions()
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        if not bucket:
            raise NotFoundError(f"{uri} names no bucket")
        return S3Store(bucket, prefix, options)
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        raise NotFoundError(f"{uri}: storage scheme {scheme!r} is not supported (use a path or s3://)")
    return LocalStore(Path(uri).expanduser().absolute())
