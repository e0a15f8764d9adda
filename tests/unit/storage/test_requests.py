"""memwal's own S3 requests: how many are in flight (`max_concurrent_requests`) and how they are signed."""

from __future__ import annotations

import hashlib

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from memwal_core.errors import BadInputError
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, StorageOptions
from memwal_core.storage.s3_http import SigningKey, sign_v4
from memwal_core.storage.stores import open_store


def test_concurrent_requests_default_setting_and_lance_never_sees_it() -> None:
    assert StorageOptions().max_concurrent_requests() == DEFAULT_CONCURRENT_REQUESTS
    options = StorageOptions.checked({"max_concurrent_requests": "8", "aws_region": "eu-west-1"})
    assert options.max_concurrent_requests() == 8
    assert "max_concurrent_requests" not in options.as_dict()
    store = open_store("s3://bucket/table", options)
    assert store.parallelism == 8
    store.close()


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5", "100000"])
def test_bad_concurrency_is_bad_input(value: str) -> None:
    with pytest.raises(BadInputError, match="max_concurrent_requests"):
        StorageOptions.parse([f"max_concurrent_requests={value}"])


@pytest.mark.parametrize(
    ("method", "url", "body", "extra"),
    [
        ("GET", "http://127.0.0.1:8333/bucket/t/_mem_wal/a%20b/manifest/1.binpb", b"", {}),
        ("HEAD", "https://bucket.s3.eu-west-1.amazonaws.com/t/x", b"", {}),
        ("PUT", "http://127.0.0.1:8333/bucket/t/lease.json", b'{"owner":1}', {"If-None-Match": "*"}),
        (
            "GET",
            "http://127.0.0.1:8333/bucket?continuation-token=a%2Bb&list-type=2&max-keys=1000&prefix=t%2F_mem_wal%2F",
            b"",
            {},
        ),
        ("POST", "http://127.0.0.1:8333/bucket?delete=", b"<Delete/>", {"Content-MD5": "abc"}),
    ],
)
@pytest.mark.parametrize("token", [None, "session-token"])
def test_signature_matches_botocore(
    method: str, url: str, body: bytes, extra: dict[str, str], token: str | None
) -> None:
    """The same signature botocore's SigV4 signer computes for the same signed headers."""
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    stamp = "20261125T190000Z"
    headers = dict(extra)
    if token:
        headers["x-amz-security-token"] = token
    sign_v4(method, url, headers, body, SigningKey.derive(credentials, stamp[:8], "eu-west-1"), stamp)

    signed = {k: v for k, v in headers.items() if k == "host" or k.startswith("x-amz-")}
    request = AWSRequest(method=method, url=url, data=body, headers=signed)
    request.context["timestamp"] = stamp
    auth = S3SigV4Auth(credentials, "s3", "eu-west-1")
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    assert headers["Authorization"].endswith(f"Signature={expected}")
    assert headers["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
