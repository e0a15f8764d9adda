"""Objects under a prefix of a Google Cloud Storage bucket, through obstore.

Signing and credentials are object_store's, as Lance's are: the options'
`google_*` keys (a service account file or key, application credentials),
else the `GOOGLE_*` environment variables, else the instance's metadata
server. A conditional put sends `x-goog-if-generation-match: 0`; one that lost
its race is answered 412, final.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import obstore

from memwal_core.errors import BadInputError
from memwal_core.storage.cloud import CloudStore, client_options, retry_config
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, GOOGLE_KEYS, StorageOptions
from memwal_core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore.store import GCSConfig


class GcsStore(CloudStore):
    """A prefix in a Google Cloud Storage bucket, named by a `gs://` URI."""

    service = "GCS"

    def __init__(
        self,
        uri: str,
        options: StorageOptions,
        *,
        parallelism: int = DEFAULT_CONCURRENT_REQUESTS,
        retry: RetryPolicy | None = None,
    ) -> None:
        limits = options.time_limits()
        endpoint = options.first("google_base_url", "base_url")
        config = cast("GCSConfig", {k: v for k, v in options.items() if k in GOOGLE_KEYS})
        allow_http = options.flag("allow_http") or options.flag("google_allow_http")
        try:
            client = obstore.store.GCSStore.from_url(
                uri,
                config=config,
                client_options=client_options(options, limits, parallelism, allow_http=allow_http),
                retry_config=retry_config(limits),
            )
        except (obstore.exceptions.BaseError, ValueError) as exc:
            # Its text may quote a value: only its kind is shown.
            raise BadInputError(
                f"cannot use {uri}: its storage options are invalid ({type(exc).__name__})"
            ) from None
        super().__init__(
            uri,
            uri.split("://", 1)[1].split("/", 1)[0],
            client,
            limits=limits,
            endpoint=endpoint,
            parallelism=parallelism,
            retry=retry,
        )
