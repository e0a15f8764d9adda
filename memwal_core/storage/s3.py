"""Objects under a prefix of an S3 bucket (AWS or any S3-compatible server), through obstore.

What is S3's own: signing (keys from the options or the environment, else
botocore's chain), the endpoint and addressing style, a 409 worth another
attempt, batch deletes of 1,000 keys, and SeaweedFS's folder keys. The rest
is every cloud store's (`cloud.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import obstore

from memwal_core.storage.cloud import CloudStore, client_options, retry_config
from memwal_core.storage.limits import TimeLimits
from memwal_core.storage.object_store import ObjectInfo, join_path
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, StorageOptions
from memwal_core.storage.retry import RetryPolicy

if TYPE_CHECKING:
    from obstore.store import S3Config, S3Credential

# How long a credential from botocore's chain is used before it is asked again (it refreshes its own).
_CREDENTIAL_SECONDS = 300.0


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
        client_options=client_options(
            options,
            limits,
            pool,
            allow_http=options.flag("allow_http") or (endpoint or "").startswith("http://"),
        ),
        retry_config=retry_config(limits),
    )


class S3Store(CloudStore):
    """A prefix in an S3 bucket (AWS or any S3-compatible server)."""

    service = "S3"
    # S3's ConditionalRequestConflict: another conditional write to the key was under way; try again.
    conflict_is_transient = True
    delete_batch = 1000  # DeleteObjects: one request (a POST) per 1,000 keys

    def __init__(
        self,
        bucket: str,
        prefix: str,
        options: StorageOptions,
        *,
        parallelism: int = DEFAULT_CONCURRENT_REQUESTS,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        limits = options.time_limits()
        endpoint = options.first(
            "aws_endpoint",
            "endpoint",
            env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        )
        if endpoint and not endpoint.startswith(("http://", "https://")):
            scheme = "http" if options.flag("allow_http") else "https"
            endpoint = f"{scheme}://{endpoint}"
        super().__init__(
            f"s3://{join_path(bucket, prefix)}",
            bucket,
            _client(bucket, self.prefix, options, endpoint, parallelism, limits),
            limits=limits,
            endpoint=endpoint,
            parallelism=parallelism,
            retry=retry,
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
