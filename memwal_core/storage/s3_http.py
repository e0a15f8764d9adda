"""A lean S3 transport for the hot object operations (GET, HEAD, PUT).

botocore's full client costs about 3.5 ms of Python per request (endpoint
rules, event hooks, model parsing), which caps a 1,000-region status at ~4
requests per millisecond of one core. Here botocore still resolves
credentials (its whole default chain) and signs (SigV4), and urllib3 sends:
about 1.4 ms per request. LIST and DELETE stay on the boto3 client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import urllib3

_CODE = re.compile(rb"<Code>([^<]+)</Code>")


class S3HttpError(Exception):
    """An S3 error response: HTTP status and the S3 error code, if the body names one."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"HTTP {status} {code}")
        self.status = status
        self.code = code or str(status)


@dataclass(frozen=True)
class S3Response:
    status: int
    headers: dict[str, str]
    data: bytes

    @property
    def last_modified(self) -> float:
        raw = self.headers.get("last-modified")
        return parsedate_to_datetime(raw).timestamp() if raw else 0.0


class SignedHttp:
    """Signed requests to one bucket, through one connection pool."""

    def __init__(
        self,
        session: Any,
        endpoint: str | None,
        bucket: str,
        *,
        region: str,
        virtual: bool,
        pool_size: int,
        timeout: urllib3.Timeout,
    ) -> None:
        self._credentials = session.get_credentials()
        self._region = region
        if endpoint is None:
            endpoint = f"https://s3.{region}.amazonaws.com"
        scheme, _, host = endpoint.rstrip("/").partition("://")
        self._base = f"{scheme}://{bucket}.{host}" if virtual else f"{scheme}://{host}/{bucket}"
        self._http = urllib3.PoolManager(maxsize=pool_size, timeout=timeout, retries=False)

    def request(
        self, method: str, key: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> S3Response:
        """Send one signed request; S3HttpError for an error status, urllib3 errors for transport failures."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        url = f"{self._base}/{quote(key, safe='/-_.~')}"
        request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
        if self._credentials is not None:
            S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(request)
        response = self._http.request(
            method, url, body=body or None, headers=dict(request.headers.items()), preload_content=True
        )
        if response.status >= 400:
            match = _CODE.search(response.data or b"")
            raise S3HttpError(response.status, match.group(1).decode() if match else "")
        return S3Response(response.status, {k.lower(): v for k, v in response.headers.items()}, response.data)
