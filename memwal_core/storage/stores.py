"""Which store serves a table URI: the one place that knows every kind of store.

Kept apart from `object_store` (the interface), which the stores import.
"""

from __future__ import annotations

from pathlib import Path

from memwal_core.errors import NotFoundError
from memwal_core.storage.local import LOCAL_PARALLELISM, LocalStore
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.s3 import S3Store


def open_store(uri: str, options: StorageOptions | None = None) -> ObjectStore:
    """The store for a table URI: a local path, `file://...` or `s3://bucket/prefix`."""
    options = options or StorageOptions()
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        if not bucket:
            raise NotFoundError(f"{uri} names no bucket")
        return S3Store(bucket, prefix, options, parallelism=options.max_concurrent_requests())
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        raise NotFoundError(f"{uri}: storage scheme {scheme!r} is not supported (use a path or s3://)")
    return LocalStore(
        Path(uri).expanduser().absolute(), parallelism=options.max_concurrent_requests(LOCAL_PARALLELISM)
    )
