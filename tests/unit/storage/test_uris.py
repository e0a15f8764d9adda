"""Table and source URIs: one spelling for memwal and Lance, credentials refused without echo."""

from __future__ import annotations

import re

import pytest

from memwal_core.errors import BadInputError
from memwal_core.storage.stores import normalize_uri


@pytest.mark.parametrize(
    ("uri", "read_as"),
    [
        ("demo/table/", "demo/table"),
        ("/", "/"),
        ("file:/tmp/a%20b/", "/tmp/a b"),
        ("file:///tmp/x", "/tmp/x"),
        ("file://localhost/tmp/y", "/tmp/y"),
        ("s3://b/p/", "s3://b/p"),
        ("S3://b/data/file?.csv", "s3://b/data/file?.csv"),
        ("az://container/tables/t/", "az://container/tables/t"),
        ("AZ://container/data/*.csv", "az://container/data/*.csv"),
        ("abfss://c@acct.dfs.core.windows.net/t/", "abfss://c@acct.dfs.core.windows.net/t"),
        ("gs://bucket/p/", "gs://bucket/p"),
        ("name:with:colons", "name:with:colons"),
    ],
)
def test_read_as(uri: str, read_as: str) -> None:
    assert normalize_uri(uri) == read_as


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://", "names no bucket"),
        ("s3://KEY:SE/CRET+x@bucket/t", "the URI s3://***@bucket/t holds credentials"),
        ("s3://KEY@bucket/t", "the URI s3://***@bucket/t holds credentials"),
        ("gs://", "names no bucket (use gs://BUCKET/PREFIX)"),
        ("az:///t", "names no container (use az://CONTAINER/PREFIX)"),
        ("abfss://@acct.dfs.core.windows.net/t", "names no container"),
        (
            "abfss://c:SE/CRET@acct.dfs.core.windows.net/t",
            "abfss://***@acct.dfs.core.windows.net/t holds credentials",
        ),
        ("az://KEY:SECRET@container/t", "the URI az://***@container/t holds credentials"),
        ("abfs://c/t", "storage scheme 'abfs' is not supported"),
        ("hdfs://host/t", "storage scheme 'hdfs' is not supported"),
        ("file://host/t", "is no local file URI"),
        ("file:relative", "is no local file URI"),
        ("file:///t?token=SECRET", "has a query or fragment"),
        ("  ", "no table URI given"),
    ],
)
def test_refused(uri: str, message: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(message)) as refused:
        normalize_uri(uri)
    assert "SE/CRET" not in str(refused.value) and "SECRET" not in str(refused.value)
