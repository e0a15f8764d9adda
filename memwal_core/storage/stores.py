"""Which store serves a table URI: the one place that knows every kind of store and URI.

Kept apart from `object_store` (the interface), which the stores import.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from memwal_core.errors import BadInputError
from memwal_core.storage.azure import SCHEMES as AZURE_SCHEMES
from memwal_core.storage.azure import AzureStore
from memwal_core.storage.gcs import GcsStore
from memwal_core.storage.local import LOCAL_PARALLELISM, LocalStore
from memwal_core.storage.object_store import ObjectStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.s3 import S3Store

SUPPORTED = (
    "a path, file:/PATH, file:///PATH, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, "
    "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX or gs://BUCKET/PREFIX"
)
# The cloud schemes, and what each calls the URI's first part.
_CONTAINERS = {"s3": "bucket", "gs": "bucket", **dict.fromkeys(AZURE_SCHEMES, "container")}


def is_cloud_uri(uri: str) -> bool:
    """Whether a normalised URI names an object store (not a local path)."""
    return uri.split("://", 1)[0] in _CONTAINERS if "://" in uri else False


def refuse_credentials(uri: str, instead: str) -> None:
    """Refuse a URI with user info (`scheme://USER:SECRET@host`), showing it with `***` in its place.

    A secret may hold `/` (AWS secrets do), which ends the host part of a URL
    for a parser: `KEY:SE/CRET@` counts as user info too.
    """
    scheme, sep, rest = uri.partition("://")
    authority = rest.split("/", 1)[0]
    userinfo = "@" in authority or ("@" in rest and ":" in rest.split("@", 1)[0])
    if scheme.lower() == "abfss" and ":" not in rest.split("@", 1)[0]:
        userinfo = False  # `abfss://CONTAINER@ACCOUNT.dfs.core.windows.net`: the container, no credential
    if sep and userinfo:
        raise BadInputError(f"the URI {scheme}://***@{rest.rsplit('@', 1)[1]} holds credentials: {instead}")


def normalize_uri(uri: str) -> str:
    """The one spelling of a table or source URI that memwal and Lance both use.

    A `file:` URI (`file:/abs`, `file:///abs`, `file://localhost/abs`, percent-
    encoded) becomes its absolute local path: Lance read `file:/abs` as the path,
    memwal as `./file:/abs`, and each wrote its part of a table in its own place.
    A cloud URI (`s3://`, `az://`, `abfss://`, `gs://`) keeps its spelling, the
    scheme in lower case. A path stays as given. Credentials in the URI (`s3://KEY:SECRET@bucket`) are
    refused without echoing them: they belong in storage options, which are never
    shown. Any other scheme is refused, naming the ones memwal reads.
    """
    if not uri.strip():
        raise BadInputError(f"no table URI given (use {SUPPORTED})")
    scheme, sep, rest = uri.partition(":")
    if not sep or "/" in scheme or not scheme.isascii() or len(scheme) < 2:
        return uri.rstrip("/") or uri  # a plain path (also `C:`-like one-letter prefixes, no scheme)
    refuse_credentials(uri, "pass them as storage options (-o KEY=VALUE, or a table's storage_options_env)")
    parts = urlsplit(uri)
    if parts.scheme in _CONTAINERS:
        container = _CONTAINERS[parts.scheme]
        if not parts.netloc or parts.netloc.startswith("@"):
            raise BadInputError(
                f"the URI {uri} names no {container} (use {parts.scheme}://{container.upper()}/PREFIX)"
            )
        # As written: `?` and `*` are a source glob's.
        return f"{parts.scheme}://{rest.lstrip('/')}".rstrip("/")
    if parts.scheme == "file":
        if parts.query or parts.fragment:
            raise BadInputError(
                f"the URI file://{parts.netloc}{parts.path} has a query or fragment "
                "(a `?` or `#` in a file name is written %3F or %23)"
            )
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise BadInputError(f"the URI {uri} is no local file URI (use file:/PATH or file:///PATH)")
        return unquote(parts.path).rstrip("/") or "/"
    if rest.startswith("//"):
        raise BadInputError(f"{uri}: storage scheme {parts.scheme!r} is not supported (use {SUPPORTED})")
    return uri.rstrip("/")  # `name:with:colons` is a relative path


def table_location(uri: str) -> str:
    """Where a table URI points, one spelling per table: `normalize_uri`'s, a local path made absolute with
    its symbolic links resolved (`t`, `./t/` and `file:///abs/t` are one table when run from /abs)."""
    uri = normalize_uri(uri)
    return uri if is_cloud_uri(uri) else os.path.realpath(os.path.expanduser(uri))


def open_store(uri: str, options: StorageOptions | None = None) -> ObjectStore:
    """The store for a table URI: a local path, `file:...`, `s3://`, `az://`, `abfss://` or `gs://`."""
    options = options or StorageOptions()
    uri = normalize_uri(uri)
    scheme = uri.split("://", 1)[0] if is_cloud_uri(uri) else ""
    parallelism = options.max_concurrent_requests()
    if scheme == "s3":
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        return S3Store(bucket, prefix, options, parallelism=parallelism)
    if scheme in AZURE_SCHEMES:
        return AzureStore(uri, options, parallelism=parallelism)
    if scheme == "gs":
        return GcsStore(uri, options, parallelism=parallelism)
    return LocalStore(
        Path(uri).expanduser().absolute(), parallelism=options.max_concurrent_requests(LOCAL_PARALLELISM)
    )
