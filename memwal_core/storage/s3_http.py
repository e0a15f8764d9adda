"""memwal's one S3 transport: signed requests through one urllib3 connection pool.

Why not boto3's client: it costs about 3.5 ms of Python per request (endpoint
rules, event hooks, model parsing), which capped a 1,000-region status at ~4
requests per millisecond of one core, and creating one takes ~100 ms of every
command's start. Here botocore only resolves credentials (its whole default
chain); memwal signs (SigV4, `sign_v4`: botocore's signer took a quarter
millisecond of every request) and urllib3 sends. The few S3 calls memwal
makes (GET, HEAD, PUT, put-if-not-exists, LIST v2 and batch DELETE) are
small enough to speak directly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit
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


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class SigningKey:
    """A SigV4 signing key: valid for one set of credentials, one day, region and service."""

    access_key: str
    secret: str = field(repr=False)
    token: str | None = field(repr=False)
    day: str
    scope: str
    key: bytes = field(repr=False)

    @classmethod
    def derive(cls, credentials: Any, day: str, region: str) -> SigningKey:
        key = f"AWS4{credentials.secret_key}".encode()
        for part in (day, region, "s3", "aws4_request"):
            key = hmac.digest(key, part.encode(), "sha256")
        scope = f"{day}/{region}/s3/aws4_request"
        return cls(credentials.access_key, credentials.secret_key, credentials.token, day, scope, key)

    def fits(self, credentials: Any, day: str) -> bool:
        return (self.day, self.access_key, self.secret, self.token) == (
            day,
            credentials.access_key,
            credentials.secret_key,
            credentials.token,
        )


def sign_v4(
    method: str, url: str, headers: dict[str, str], payload: bytes, key: SigningKey, stamp: str
) -> None:
    """Add the SigV4 headers (`x-amz-date`, payload hash, `Authorization`) to `headers` for `url`.

    Signs host and the `x-amz-*` headers only, as S3 requires; `url` is already
    percent-encoded and its query sorted (what S3 canonicalises it to).
    """
    parts = urlsplit(url)
    headers["host"] = parts.netloc
    headers["x-amz-date"] = stamp
    headers["x-amz-content-sha256"] = hashlib.sha256(payload).hexdigest() if payload else _EMPTY_SHA256
    signed = sorted(k for k in headers if k == "host" or k.startswith("x-amz-"))
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            parts.query,
            "".join(f"{k}:{headers[k].strip()}\n" for k in signed),
            ";".join(signed),
            headers["x-amz-content-sha256"],
        ]
    )
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{key.scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.digest(key.key, to_sign.encode(), "sha256").hex()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key.access_key}/{key.scope}, "
        f"SignedHeaders={';'.join(signed)}, Signature={signature}"
    )


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
        self._key: SigningKey | None = None

    def _signing_key(self, day: str) -> SigningKey:
        """The key for today's credentials (refreshed credentials or a new day derive a new one)."""
        frozen = self._credentials.get_frozen_credentials()
        key = self._key
        if key is None or not key.fits(frozen, day):
            key = self._key = SigningKey.derive(frozen, day, self._region)
        return key

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
        url = f"{self._base}/{quote(key, safe='/-_.~')}" if key else self._bucket_url
        if query is not None:
            url += "?" + urlencode(sorted(query.items()), quote_via=quote, safe="-_.~")
        sent = dict(headers or {})
        if self._credentials is not None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            signing = self._signing_key(stamp[:8])
            if signing.token:
                sent["x-amz-security-token"] = signing.token
            sign_v4(method, url, sent, body, signing, stamp)
        deadline = time.monotonic() + self._request_timeout
        response = self._http.request(method, url, body=body or None, headers=sent, preload_content=False)
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
