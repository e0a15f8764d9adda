"""Objects under a prefix of an S3 bucket (AWS or any S3-compatible server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import urllib3

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.object_store import ObjectInfo, ObjectStore, join_path
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, StorageOptions
from memwal_core.storage.retry import RetryPolicy
from memwal_core.storage.s3_http import ListPage, S3HttpError, SignedHttp

T = TypeVar("T")

# S3 accepts at most 1,000 keys per DeleteObjects request.
DELETE_BATCH = 1000
# Error codes worth another attempt (with any 5xx status).
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "Throttling",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
        "409",
    }
)


def _credentials(options: StorageOptions) -> Any:
    """Credentials from the options, else botocore's default chain (env, profile, instance role); None: unsigned."""
    import botocore.session

    session = botocore.session.get_session()
    key = options.first("aws_access_key_id", "access_key_id")
    secret = options.first("aws_secret_access_key", "secret_access_key")
    if key and secret:
        session.set_credentials(
            key, secret, options.first("aws_session_token", "session_token", "aws_token", "token")
        )
    return session.get_credentials()


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
        self._http = SignedHttp(
            _credentials(options),
            endpoint,
            bucket,
            region=options.first("aws_region", "region", env=("AWS_REGION", "AWS_DEFAULT_REGION"))
            or "us-east-1",
            virtual=options.flag("aws_virtual_hosted_style_request", default=endpoint is None),
            pool_size=parallelism,
            connect_timeout=self.limits.connect,
            request_timeout=self.limits.request,
        )

    def _key(self, path: str) -> str:
        return join_path(self.prefix, path)

    @staticmethod
    def _is_transient(exc: BaseException) -> bool:
        if isinstance(exc, urllib3.exceptions.HTTPError):
            return True
        if isinstance(exc, S3HttpError):
            if exc.code in TRANSIENT_CODES:
                return True
            return exc.status >= 500
        return False

    def _call(self, kind: str, path: str, call: Callable[[], T]) -> T:
        def attempt() -> T:
            self.stats.add(kind)
            return call()

        try:
            return self.retry.run(attempt, self._is_transient)
        except S3HttpError as exc:
            code = exc.code
            if code in ("404", "NoSuchKey", "NotFound"):
                raise NotFoundError(f"{self.describe(path)} does not exist") from exc
            if code == "NoSuchBucket":
                raise NotFoundError(f"bucket {self.bucket!r} does not exist") from exc
            if code in ("412", "PreconditionFailed"):
                raise AlreadyExistsError(f"{self.describe(path)} already exists") from exc
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise StorageError(f"access to {self.describe(path)} denied ({code})") from exc
            raise StorageError(f"{kind} of {self.describe(path)} failed ({code})") from exc
        except urllib3.exceptions.HTTPError as exc:
            where = self.endpoint or "S3"
            # urllib3 files a refused connection (NewConnectionError) under its connect timeouts.
            silent = isinstance(exc, urllib3.exceptions.TimeoutError)
            if silent and not isinstance(exc, urllib3.exceptions.NewConnectionError):
                raise StorageError(
                    f"storage did not answer: {where} gave no full reply for {self.describe(path)} within "
                    f"{self.limits.request:g} s (storage option timeout)"
                ) from exc
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

    def _pages(self, path: str, *, delimiter: bool) -> Iterator[ListPage]:
        prefix = self._key(path)
        prefix = f"{prefix}/" if prefix else ""
        page = self._call(
            "list", path, partial(self._http.list_page, prefix, delimiter=delimiter, token=None)
        )
        yield page
        while page.next_token is not None:
            after = partial(self._http.list_page, prefix, delimiter=delimiter, token=page.next_token)
            page = self._call("list", path, after)
            yield page

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    def is_dir(self, path: str) -> bool:
        prefix = self._key(path)
        page = self._call(
            "list",
            path,
            lambda: self._http.list_page(
                f"{prefix}/" if prefix else "", delimiter=False, token=None, max_keys=1
            ),
        )
        return page.key_count > 0

    def list_dirs(self, path: str) -> list[str]:
        names = [
            p.rstrip("/").rsplit("/", 1)[-1]
            for page in self._pages(path, delimiter=True)
            for p in page.prefixes
        ]
        return sorted(names)

    def list_files(
        self, path: str, *, recursive: bool = False, before: str | None = None
    ) -> list[ObjectInfo]:
        found: list[ObjectInfo] = []
        for page in self._pages(path, delimiter=not recursive):
            infos = [ObjectInfo(self._relative(obj.key), obj.size, obj.mtime) for obj in page.objects]
            found += [info for info in infos if before is None or info.path < before]
            if before is not None and infos and infos[-1].path >= before:
                break  # S3 lists in key order: the rest sorts after `before`
        return sorted(found, key=lambda info: info.path)

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: self._http.request("DELETE", self._key(path)))

    def delete_many(self, paths: Sequence[str]) -> None:
        """One DeleteObjects request per 1,000 keys (S3's batch limit), batches in parallel."""
        batches = [list(paths[i : i + DELETE_BATCH]) for i in range(0, len(paths), DELETE_BATCH)]

        def delete_batch(batch: list[str]) -> None:
            keys = [self._key(p) for p in batch]
            errors = self._call("delete_many", batch[0], lambda: self._http.delete_objects(keys))
            failed = [(key, code) for key, code in errors if code != "NoSuchKey"]
            if failed:
                raise StorageError(f"delete of s3://{self.bucket}/{failed[0][0]} failed ({failed[0][1]})")

        self.map(delete_batch, batches)

    def delete_trees(self, paths: Sequence[str]) -> list[list[ObjectInfo]]:
        found = [self.list_files(path, recursive=True) for path in paths]
        keys: list[str] = []
        for path, tree in zip(paths, found, strict=True):
            files = [info.path for info in tree]
            # Some S3 servers (SeaweedFS) keep emptied folders as listable prefixes unless
            # their "dir/" keys are deleted too; on AWS these keys are absent and cost nothing.
            folders = {path} | {f.rsplit("/", 1)[0] for f in files}
            for folder in list(folders):
                while folder.startswith(f"{path}/"):
                    folder = folder.rsplit("/", 1)[0]
                    folders.add(folder)
            keys += files + [f"{folder}/" for folder in sorted(folders, key=lambda f: -f.count("/"))]
        self.delete_many(keys)
        return found
