"""memwal's own S3 requests: how many are in flight (`max_concurrent_requests`)."""

from __future__ import annotations

import pytest

from memwal_core.errors import BadInputError
from memwal_core.storage.options import DEFAULT_CONCURRENT_REQUESTS, StorageOptions
from memwal_core.storage.stores import open_store


def test_concurrent_requests_default_setting_and_lance_never_sees_it() -> None:
    assert StorageOptions().max_concurrent_requests() == DEFAULT_CONCURRENT_REQUESTS
    options = StorageOptions.checked({"max_concurrent_requests": "8", "aws_region": "eu-west-1"})
    assert options.max_concurrent_requests() == 8
    assert "max_concurrent_requests" not in options.as_dict()
    store = open_store("s3://bucket/table", options)
    assert store.parallelism == 8


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5", "100000"])
def test_bad_concurrency_is_bad_input(value: str) -> None:
    with pytest.raises(BadInputError, match="max_concurrent_requests"):
        StorageOptions.parse([f"max_concurrent_requests={value}"])
