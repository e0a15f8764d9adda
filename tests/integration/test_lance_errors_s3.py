"""The Lance error text of a WAL write whose response was lost, provoked on a real S3 server.

Only an object store can lose a response after applying the request, so this
one text of `memwal_core.lance_errors` is tested here, not with the others in
tests/unit/test_lance_errors.py.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import lance
import pyarrow as pa
import pytest

from memwal_core import lance_errors
from memwal_core.errors import UncertainWriteError
from memwal_core.lance_errors import WriteFailure
from memwal_core.services.writer import _native_error
from tests.support.lost_response import LoseOneResponse
from tests.support.model import KEYED_SCHEMA


def rows(*ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": "x"} for i in ids], schema=KEYED_SCHEMA)


@pytest.mark.s3
def test_lost_wal_put(seaweed: Any) -> None:
    """The WAL entry is stored but its PUT's answer is lost: Lance's retry finds the position taken."""
    uri = f"s3://memwal-test/lost-put-{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    lance.write_dataset(rows(1), uri, storage_options=options).initialize_mem_wal()
    region = str(uuid.uuid4())
    upstream = int(seaweed.endpoint.rsplit(":", 1)[1])
    with LoseOneResponse(upstream, method="PUT", path_part=f"/_mem_wal/{region}/wal/") as proxy:
        # A request timeout of 1 s: the lost answer costs a second, not object_store's default 30.
        proxied = lance.dataset(uri, storage_options={**options, "aws_endpoint": proxy.url, "timeout": "1s"})
        writer = proxied.mem_wal_writer(region)
        try:
            with pytest.raises(OSError) as info:
                writer.put(rows(2))
        finally:
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                writer.close()
    assert len(proxy.lost) == 1, proxy.lost
    lost = info.value
    assert lance_errors.write_failure(lost) is WriteFailure.LOST_RESPONSE, lost
    assert isinstance(_native_error(region, lost), UncertainWriteError)
