"""Storage options: one value passed both to Lance and to our object store.

Secrets stay inside; `repr` and `redacted()` never show them, so an options
object can appear in logs, errors and Dagster metadata safely. A refusal names
the option and quotes a value only when it reads as a number (`errors.quoted`),
and no more of a key than a known key's name (`errors.named`): a secret typed in
the wrong place would show otherwise. Every
value that could be a secret is withheld from every message memwal prints
(`errors.withhold`), whatever key it was given under and whoever quotes it.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping

from memwal_core.arguments import checked
from memwal_core.errors import BadInputError, named, quoted, withhold
from memwal_core.storage.limits import TimeLimits, time_limits, with_lance_defaults

_SECRET_MARKERS = (
    "secret",
    "password",
    "token",
    "credential",
    "key_id",
    "access_key",
    "sas",
    "account_key",
    "master_key",
    "customer_key",  # S3's SSE-C key (`sse_customer_key_base64`)
)

# The options Lance 14 understands for local, S3, Azure and GCS tables (object_store's S3, Azure,
# GCS and HTTP client keys, with their aliases, and Lance's own). Lance ignores any other key
# silently, so a typo such as `aws_endpont` would send requests to AWS instead of the intended endpoint.
_S3_KEYS = [
    "access_key_id",
    "secret_access_key",
    "default_region",
    "region",
    "bucket",
    "bucket_name",
    "endpoint",
    "endpoint_url",
    "token",
    "session_token",
    "virtual_hosted_style_request",
    "s3_express",
    "imdsv1_fallback",
    "metadata_endpoint",
    "unsigned_payload",
    "checksum_algorithm",
    "container_credentials_relative_uri",
    "container_credentials_full_uri",
    "container_authorization_token_file",
    "web_identity_token_file",
    "role_arn",
    "role_session_name",
    "endpoint_url_sts",
    "skip_signature",
    "copy_if_not_exists",
    "conditional_put",
    "disable_tagging",
    "disable_bulk_delete",
    "request_payer",
    "server_side_encryption",
    "sse_kms_key_id",
    "sse_bucket_key_enabled",
    "sse_customer_key_base64",
]
# object_store's Azure keys with their aliases (Lance hands a table's options to its builder, as memwal's
# own client does): each line one setting.
AZURE_KEYS = frozenset(
    [
        *("azure_storage_account_name", "account_name"),
        *("azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key"),
        *("master_key", "account_key", "access_key"),
        *("azure_storage_client_id", "azure_client_id", "client_id"),
        *("azure_storage_client_secret", "azure_client_secret", "client_secret"),
        *("azure_storage_tenant_id", "azure_storage_authority_id", "azure_tenant_id", "azure_authority_id"),
        *("tenant_id", "authority_id"),
        *("azure_storage_authority_host", "azure_authority_host", "authority_host"),
        *("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token"),
        *("azure_storage_token", "bearer_token", "token"),
        *("azure_storage_use_emulator", "use_emulator"),
        *("azure_storage_endpoint", "azure_endpoint", "endpoint"),
        *("azure_msi_endpoint", "azure_identity_endpoint", "identity_endpoint", "msi_endpoint"),
        *("azure_object_id", "object_id"),
        *("azure_msi_resource_id", "msi_resource_id"),
        *("azure_federated_token_file", "federated_token_file"),
        *("azure_use_fabric_endpoint", "use_fabric_endpoint"),
        *("azure_use_azure_cli", "use_azure_cli"),
        *("azure_skip_signature", "skip_signature"),
        *("azure_container_name", "container_name"),
        *("azure_disable_tagging", "disable_tagging"),
        *("azure_fabric_token_service_url", "fabric_token_service_url"),
        *("azure_fabric_workload_host", "fabric_workload_host"),
        *("azure_fabric_session_token", "fabric_session_token"),
        *("azure_fabric_cluster_identifier", "fabric_cluster_identifier"),
    ]
)
# object_store's GCS keys with their aliases.
GOOGLE_KEYS = frozenset(
    [
        *("google_service_account", "service_account", "google_service_account_path", "service_account_path"),
        *("google_service_account_key", "service_account_key"),
        *("google_bucket", "google_bucket_name", "bucket", "bucket_name"),
        *("google_base_url", "base_url"),
        *("google_application_credentials", "application_credentials"),
        *("google_bearer_token", "bearer_token"),
        *("google_skip_signature", "skip_signature"),
    ]
)
USER_AGENT = "user_agent"
_CLIENT_KEYS = [
    "allow_http",
    "allow_invalid_certificates",
    "disable_system_certificates",
    "connect_timeout",
    "default_content_type",
    "http1_only",
    "http2_only",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle",
    "http2_max_frame_size",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "proxy_url",
    "proxy_ca_certificate",
    "proxy_excludes",
    "randomize_addresses",
    "read_timeout",
    "timeout",
    USER_AGENT,
]
_LANCE_KEYS = [
    "block_size",
    "download_retry_count",
    "client_max_retries",
    "client_retry_timeout",
    "use_opendal",
    "aws_provider_scheme",
    "aws_bucket_name",
    "aws_endpoint_url",
    "aws_token",
    "expires_at_millis",
    "refresh_offset_millis",
    # Lance's throttle layer (over its object store's own retries): its request rate and retries.
    "lance_aimd_initial_rate",
    "lance_aimd_min_rate",
    "lance_aimd_max_rate",
    "lance_aimd_decrease_factor",
    "lance_aimd_additive_increment",
    "lance_aimd_burst_capacity",
    "lance_aimd_max_retries",
    "lance_aimd_min_backoff_ms",
    "lance_aimd_max_backoff_ms",
]
# memwal's own options: never handed to Lance.
MAX_CONCURRENT_REQUESTS = "max_concurrent_requests"
# Requests memwal keeps in flight at once: enough to hide a cloud store's ~20 ms per request.
DEFAULT_CONCURRENT_REQUESTS = 64
CONCURRENT_REQUESTS_LIMIT = 1024
_MEMWAL_KEYS = [MAX_CONCURRENT_REQUESTS]
KNOWN_KEYS = frozenset(
    [
        *_S3_KEYS,
        *(f"aws_{k}" for k in _S3_KEYS),
        *AZURE_KEYS,
        *GOOGLE_KEYS,
        *_CLIENT_KEYS,
        # `allow_http` as object_store's Azure and GCS builders also spell it.
        *("azure_allow_http", "google_allow_http"),
        *_LANCE_KEYS,
        *_MEMWAL_KEYS,
    ]
)
# Lance scopes an option to one registered base path as `base_<id>.<key>`.
_BASE_SCOPED = re.compile(r"^base_\d+\.")
# Options whose values messages show on purpose: where requests go, and who sends them. (An endpoint is
# a URL, shown too; its user info goes by `redact`'s own rule.)
_SHOWN_KEYS = frozenset(
    [
        *(k for name in ("bucket", "bucket_name", "region", "default_region") for k in (name, f"aws_{name}")),
        *("azure_storage_account_name", "account_name", "azure_container_name", "container_name"),
        *("google_bucket", "google_bucket_name"),
        USER_AGENT,
    ]
)
# A shorter value (`true`, `30s`, `AES256`) is no secret, and withholding it would blank words of messages.
MIN_WITHHELD_CHARS = 8


def check_known(keys: Iterable[str]) -> None:
    """Refuse an option Lance would ignore, naming the closest known key and all of them."""
    for key in keys:
        plain = _BASE_SCOPED.sub("", key.strip().lower())
        if plain in KNOWN_KEYS:
            continue
        close = difflib.get_close_matches(plain, KNOWN_KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise BadInputError(
            f"unknown storage option {named(key, KNOWN_KEYS)}{hint}; "
            f"known options: {', '.join(sorted(KNOWN_KEYS))}"
        )


def is_secret(key: str) -> bool:
    """Whether a storage option must never be shown."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def _withheld(key: str, value: str) -> bool:
    """Whether a value may be a secret: any long enough one but a URL or a shown option's (a secret may be
    given under the wrong key)."""
    plain = _BASE_SCOPED.sub("", key.strip().lower())
    return len(value) >= MIN_WITHHELD_CHARS and plain not in _SHOWN_KEYS and "://" not in value


class StorageOptions(Mapping[str, str]):
    """Lance-style storage options (`aws_endpoint`, `aws_access_key_id`, ...); immutable."""

    @checked
    def __init__(self, values: Mapping[str, object] | None = None) -> None:
        self._values: dict[str, str] = {str(k): str(v) for k, v in (values or {}).items()}
        withhold(v for k, v in self._values.items() if _withheld(k, v))

    @classmethod
    def parse(cls, pairs: Iterable[str]) -> StorageOptions:
        """Options from `KEY=VALUE` strings, as the CLI's `-o` takes them."""
        values: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise BadInputError(f"storage option {named(pair, KNOWN_KEYS)} is not KEY=VALUE")
            values[key.strip()] = value
        return cls.checked(values)

    @classmethod
    def checked(cls, values: Mapping[str, object]) -> StorageOptions:
        """Options a user gave: unknown keys and malformed time limits are bad input."""
        check_known(values)
        options = cls(values)
        options.time_limits()
        options.max_concurrent_requests()
        return options

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean option, as Lance spells them ("true"/"false")."""
        raw = self._values.get(key)
        return default if raw is None else raw.strip().lower() in ("1", "true", "yes")

    def first(self, *keys: str, env: Iterable[str] = ()) -> str | None:
        """The first option set among `keys`, else the first set environment variable."""
        for key in keys:
            if self._values.get(key):
                return self._values[key]
        for name in env:
            if os.environ.get(name):
                return os.environ[name]
        return None

    def redacted(self) -> dict[str, str]:
        """A copy safe to print: secret values replaced."""
        return {k: ("***" if is_secret(k) else v) for k, v in self._values.items()}

    def time_limits(self) -> TimeLimits:
        """How long memwal's own requests may take (the same limits Lance is handed)."""
        return time_limits(self._values)

    def max_concurrent_requests(self, default: int = DEFAULT_CONCURRENT_REQUESTS) -> int:
        """How many requests memwal's own object store keeps in flight at once (option `max_concurrent_requests`).

        Every per-region phase (plans, leases, generation opens, GC listings and deletes) runs on
        this many threads, so on a store with latency L a phase over N regions takes about N * L / this.
        """
        raw = self._values.get(MAX_CONCURRENT_REQUESTS)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if not 1 <= value <= CONCURRENT_REQUESTS_LIMIT:
            raise BadInputError(
                f"storage option {MAX_CONCURRENT_REQUESTS}={quoted(raw)} is not a whole number "
                f"from 1 to {CONCURRENT_REQUESTS_LIMIT}"
            )
        return value

    def for_service(self, service: str) -> StorageOptions:
        """These options with a User-Agent naming the memwal service that makes the requests (`memwal/merge`),
        unless the user set one: a store's access log (S3 server access logs, CloudTrail) then shows what
        each service costs. Lance appends its own name to it; memwal's S3 client sends it as it is."""
        if USER_AGENT in self._values:
            return self
        return StorageOptions({**self._values, USER_AGENT: f"memwal/{service}"})

    def as_dict(self) -> dict[str, str]:
        """A plain dict for Lance's `storage_options=`, with memwal's default time limits (none of memwal's own)."""
        return with_lance_defaults({k: v for k, v in self._values.items() if k not in _MEMWAL_KEYS})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageOptions) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"StorageOptions({self.redacted()!r})"

    def __reduce__(self) -> tuple[type[StorageOptions], tuple[dict[str, str]]]:
        """Built again where unpickled (a Spark executor), so that process withholds the values too."""
        return (StorageOptions, (self._values,))
