"""Objects under a prefix of an S3 bucket (AWS or any S3-compatible server)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import urllib3

from memwal_core.errors import AlreadyExistsError, NotFoundError, StorageError
from memwal_core.storage.object_store import ObjectInfo, ObjectStore, join_path
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.retry import RetryPolicy
from memwal_core.storage.s3_http import S3HttpError, SignedHttp

T = TypeVar("T")

# S3 accepts at most 1,000 keys per DeleteObjects request.
DELETE_BATCH = 1000


class S3Store(ObjectStore):
    """A prefix in an S3 bucket (AWS or any S3-compatible server)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        options: StorageOptions,
        *,
        # Requests are mostly Python CPU (signing) under the GIL; more threads only contend.
        parallelism: int = 32,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(f"s3://{join_path(bucket, prefix)}", parallelism=parallelism)
        import boto3
        from botocore.config import Config

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
        virtual = options.flag("aws_virtual_hosted_style_request", default=endpoint is None)
        session = boto3.session.Session(
            aws_access_key_id=options.first("aws_access_key_id", "access_key_id"),
            aws_secret_access_key=options.first("aws_secret_access_key", "secret_access_key"),
            aws_session_token=options.first("aws_session_token", "session_token"),
            region_name=options.first("aws_region", "region", env=("AWS_REGION", "AWS_DEFAULT_REGION"))
            or "us-east-1",
        )
        self._http = SignedHttp(
            session,
            endpoint,
            bucket,
            region=session.region_name,
            virtual=virtual,
            pool_size=parallelism,
            timeout=urllib3.Timeout(connect=self.limits.connect, read=self.limits.request),
        )
        self._client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                # Our RetryPolicy owns retries, so it can tell "already exists" apart. (botocore's
                # `max_attempts` counts retries, not attempts: 1 made every request twice.)
                retries={"total_max_attempts": 1, "mode": "standard"},
                max_pool_connections=parallelism,
                connect_timeout=self.limits.connect,
                read_timeout=self.limits.request,
                s3={"addressing_style": "virtual" if virtual else "path"},
            ),
        )

    def _key(self, path: str) -> str:
        return join_path(self.prefix, path)

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
            if self._timed_out(exc):
                raise StorageError(
                    f"storage did not answer: {where} gave no reply for {self.describe(path)} within "
                    f"{self.limits.request:g} s (storage option timeout)"
                ) from exc
            raise StorageError(
                f"cannot reach {where} for {self.describe(path)}: {type(exc).__name__}"
            ) from exc

    @staticmethod
    def _timed_out(exc: BaseException) -> bool:
        from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

        return isinstance(exc, ConnectTimeoutError | ReadTimeoutError | urllib3.exceptions.TimeoutError)

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

    def delete_many(self, paths: Sequence[str]) -> None:
        """One DeleteObjects request per 1,000 keys (S3's batch limit), batches in parallel."""
        batches = [list(paths[i : i + DELETE_BATCH]) for i in range(0, len(paths), DELETE_BATCH)]

        def delete_batch(batch: list[str]) -> None:
            objects = [{"Key": self._key(p)} for p in batch]
            response = self._call(
                "delete_many",
                batch[0],
                lambda: self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                ),
            )
            errors = [e for e in response.get("Errors", []) or [] if e.get("Code") != "NoSuchKey"]
            if errors:
                key = errors[0].get("Key", "")
                raise StorageError(f"delete of s3://{self.bucket}/{key} failed ({errors[0].get('Code')})")

        self.map(delete_batch, batches)

    def delete_tree(self, path: str) -> list[ObjectInfo]:
        found = self.list_files(path, recursive=True)
        files = [info.path for info in found]
        # Some S3 servers (SeaweedFS) keep emptied folders as listable prefixes unless
        # their "dir/" keys are deleted too; on AWS these keys are absent and cost nothing.
        folders = {path} | {f.rsplit("/", 1)[0] for f in files}
        for folder in list(folders):
            while folder.startswith(f"{path}/"):
                folder = folder.rsplit("/", 1)[0]
                folders.add(folder)
        markers = [f"{folder}/" for folder in sorted(folders, key=lambda f: -f.count("/"))]
        self.delete_many(files + markers)
        return found
