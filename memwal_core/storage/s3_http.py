"""memwal's one S3 transport: signed requests through one urllib3 connection pool.

Why not boto3's client: it costs about 3.5 ms of Python per request (endpoint
rules, event hooks, model parsing), which capped a 1,000-region status at ~4
requests per millisecond of one core, and creating one takes ~100 ms of every
command's start. Here botocore only resolves credentials (its whole default
chain) and signs (SigV4); urllib3 sends: about 1.4 ms per request. The few
S3 calls memwal makes (GET, HEAD, PUT, put-if-not-exists, LIST v2 and batch
DELETE) are small enough to speak directly.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode
from xml.etree import ElementTree
from xml.sax.saxutils import escape

import urllib3

_CODE = re.compile(rb"<Code>([^<]+)</Code>")
# Bytes read from a response at a time, at most.
_CHUNK = 1 << 16
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


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


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    mtime: float


@dataclass(frozen=True)
class ListPage:
    """One page of a LIST v2: objects, common prefixes (with a delimiter) and the next token."""

    objects: list[ListedObject]
    prefixes: list[str]
    key_count: int
    next_token: str | None


def _text(element: ElementTree.Element, tag: str) -> str:
    found = element.find(f"{_NS}{tag}")
    return found.text or "" if found is not None else ""


def parse_list(body: bytes) -> ListPage:
    """A ListObjectsV2 response body."""
    root = ElementTree.fromstring(body)
    objects = [
        ListedObject(
            _text(item, "Key"),
            int(_text(item, "Size") or 0),
            datetime.fromisoformat(_text(item, "LastModified").replace("Z", "+00:00")).timestamp(),
        )
        for item in root.iter(f"{_NS}Contents")
    ]
    prefixes = [_text(item, "Prefix") for item in root.iter(f"{_NS}CommonPrefixes")]
    truncated = _text(root, "IsTruncated") == "true"
    token = _text(root, "NextContinuationToken") or None
    count = _text(root, "KeyCount")
    return ListPage(
        objects, prefixes, int(count) if count else len(objects) + len(prefixes), token if truncated else None
    )


def delete_body(keys: Sequence[str]) -> bytes:
    """A quiet DeleteObjects request body for `keys`."""
    objects = "".join(f"<Object><Key>{escape(key)}</Key></Object>" for key in keys)
    return f"<Delete><Quiet>true</Quiet>{objects}</Delete>".encode()


def delete_errors(body: bytes) -> list[tuple[str, str]]:
    """(key, code) of every object a DeleteObjects response says it could not delete."""
    root = ElementTree.fromstring(body) if body.strip() else None
    if root is None:
        return []
    return [(_text(e, "Key"), _text(e, "Code")) for e in root.iter(f"{_NS}Error")]


class SignedHttp:
    """Signed requests to one bucket, through one connection pool."""

    def __init__(
        self,
        credentials: Any,
        endpoint: str | None,
        bucket: str,
        *,
        region: str,
        virtual: bool,
        pool_size: int,
        connect_timeout: float,
        request_timeout: float,
    ) -> None:
        self._credentials = credentials
        self._request_timeout = request_timeout
        self._region = region
        if endpoint is None:
            endpoint = f"https://s3.{region}.amazonaws.com"
        scheme, _, host = endpoint.rstrip("/").partition("://")
        self._base = f"{scheme}://{bucket}.{host}" if virtual else f"{scheme}://{host}/{bucket}"
        # The bucket itself, as botocore addresses it: `/` on its own host, no slash after its path.
        self._bucket_url = f"{self._base}/" if virtual else self._base
        timeout = urllib3.Timeout(connect=connect_timeout, read=request_timeout)
        self._http = urllib3.PoolManager(maxsize=pool_size, timeout=timeout, retries=False)

    def request(
        self,
        method: str,
        key: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> S3Response:
        """Send one signed request; S3HttpError for an error status, urllib3 errors for transport failures.

        An empty `key` addresses the bucket itself (LIST, batch DELETE). The
        whole answer, head and body, must arrive within the request time limit
        (a ReadTimeoutError otherwise): a socket's own timeout bounds only the
        wait for each next byte, which an endpoint trickling its answer resets
        forever.
        """
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        url = f"{self._base}/{quote(key, safe='/-_.~')}" if key else self._bucket_url
        if query is not None:
            url += "?" + urlencode(sorted(query.items()), quote_via=quote, safe="-_.~")
        request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
        if self._credentials is not None:
            S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(request)
        deadline = time.monotonic() + self._request_timeout
        response = self._http.request(
            method, url, body=body or None, headers=dict(request.headers.items()), preload_content=False
        )
        try:
            data = self._body(response, deadline, url)
        except BaseException:
            response.close()  # part of the body is still on the wire: the connection cannot be reused
            raise
        finally:
            response.release_conn()
        if response.status >= 400:
            match = _CODE.search(data)
            raise S3HttpError(response.status, match.group(1).decode() if match else "")
        return S3Response(response.status, {k.lower(): v for k, v in response.headers.items()}, data)

    def _body(self, response: urllib3.BaseHTTPResponse, deadline: float, url: str) -> bytes:
        """The response body, read as it arrives; ReadTimeoutError once the deadline has passed."""
        chunks = []
        while chunk := response.read1(_CHUNK):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                late = f"the answer took longer than {self._request_timeout:g} s"
                raise urllib3.exceptions.ReadTimeoutError(None, url, late)  # type: ignore[arg-type]
        return b"".join(chunks)

    def list_page(self, prefix: str, *, delimiter: bool, token: str | None, max_keys: int = 1000) -> ListPage:
        """One page of LIST v2 below `prefix`."""
        query = {"list-type": "2", "prefix": prefix, "max-keys": str(max_keys)}
        if delimiter:
            query["delimiter"] = "/"
        if token:
            query["continuation-token"] = token
        return parse_list(self.request("GET", "", query=query).data)

    def delete_objects(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """One DeleteObjects request (at most 1,000 keys); the (key, code) S3 could not delete."""
        body = delete_body(keys)
        checksum = base64.b64encode(hashlib.md5(body).digest()).decode()  # S3 requires it for this call
        response = self.request("POST", "", body, {"Content-MD5": checksum}, query={"delete": ""})
        return delete_errors(response.data)
