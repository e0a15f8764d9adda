"""Objects under a prefix of an Azure Blob Storage container (or Azurite), through obstore.

Signing and credentials are object_store's, as Lance's are: the options'
`azure_*` keys, else the `AZURE_*` environment variables (an account key, a
SAS, a service principal, workload or managed identity, the Azure CLI). A
conditional put that lost its race is answered 409 (BlobAlreadyExists; 412
where a service answers so): final, never retried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import obstore

from memwal_core.errors import BadInputError
from memwal_core.storage.cloud import CloudStore, client_options, retry_config
from memwal_core.storage.options import AZURE_KEYS, DEFAULT_CONCURRENT_REQUESTS, StorageOptions
from memwal_core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore.store import AzureConfig

# The URI schemes of a container: `az://CONTAINER/PREFIX`, `abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX`.
SCHEMES = ("az", "abfss")
_NO_ACCOUNT = (
    "no storage account named (storage option azure_storage_account_name, or AZURE_STORAGE_ACCOUNT_NAME)"
)


class AzureStore(CloudStore):
    """A prefix in an Azure Blob Storage container, named by an `az://` or `abfss://` URI."""

    service = "Azure Blob Storage"
    container_word = "container"
    missing_container_codes = frozenset({"ContainerNotFound"})
    delete_batch = 256  # a blob batch request takes at most 256 subrequests

    def __init__(
        self,
        uri: str,
        options: StorageOptions,
        *,
        parallelism: int = DEFAULT_CONCURRENT_REQUESTS,
        retry: RetryPolicy | None = None,
    ) -> None:
        limits = options.time_limits()
        endpoint = options.first(
            "azure_storage_endpoint",
            "azure_endpoint",
            "endpoint",
            env=("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
        )
        config = cast("AzureConfig", {k: v for k, v in options.items() if k in AZURE_KEYS})
        allow_http = (
            options.flag("allow_http")
            or options.flag("azure_allow_http")
            or (endpoint or "").startswith("http://")
        )
        try:
            client = obstore.store.AzureStore.from_url(
                uri,
                config=config,
                client_options=client_options(options, limits, parallelism, allow_http=allow_http),
                retry_config=retry_config(limits),
            )
        except (obstore.exceptions.BaseError, ValueError) as exc:
            # Its text may quote a value: only its kind is shown, or what is missing.
            missing = "Account must be specified" in str(exc)
            reason = _NO_ACCOUNT if missing else f"its storage options are invalid ({type(exc).__name__})"
            raise BadInputError(f"cannot use {uri}: {reason}") from None
        super().__init__(
            uri,
            uri.split("://", 1)[1].split("/", 1)[0].split("@", 1)[0],
            client,
            limits=limits,
            endpoint=endpoint,
            parallelism=parallelism,
            retry=retry,
        )
