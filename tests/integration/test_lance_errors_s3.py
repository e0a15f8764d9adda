"""The Lance error texts of lost responses and of a lost claim race, provoked on a real S3 server.

Only an object store can lose a response after applying the request, and
only a proxy can hold a claim's PUT while another claim lands, so these
texts of `memwal_core.lance_errors` are tested here, not with the others in
tests/unit/test_lance_errors.py.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import lance
import pyarrow as pa
import pytest

from memwal_core import lance_errors
from memwal_core.errors import FencedError, UncertainWriteError
from memwal_core.format.naming import region_manifest_name
from memwal_core.lance_errors import WriteFailure
from memwal_core.services.writer import _native_error
from tests.support.held_request import HoldOneRequest
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


def claim_error(dataset: lance.LanceDataset, region: str) -> Exception:
    """The error a claim of `region` through `dataset` raises."""
    with pytest.raises(OSError) as info:
        dataset.mem_wal_writer(region).close()
    return info.value


@pytest.mark.s3
def test_lost_claim_race(seaweed: Any) -> None:
    """Another claim lands between this claim's read of the newest manifest and its PUT: the PUT is refused."""
    uri = f"s3://memwal-test/claim-race-{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    lance.write_dataset(rows(1), uri, storage_options=options).initialize_mem_wal()
    region = str(uuid.uuid4())
    upstream = int(seaweed.endpoint.rsplit(":", 1)[1])
    claim_put = f"/_mem_wal/{region}/manifest/{region_manifest_name(1)}"
    with HoldOneRequest(upstream, method="PUT", path_part=claim_put) as proxy:
        proxied = lance.dataset(uri, storage_options={**options, "aws_endpoint": proxy.url})
        lost: list[Exception] = []
        loser = threading.Thread(target=lambda: lost.append(claim_error(proxied, region)))
        loser.start()
        assert proxy.arrived.wait(60), "the claim's PUT never came"
        lance.dataset(uri, storage_options=options).mem_wal_writer(region).close()  # the winner
        proxy.release()
        loser.join(60)
    assert lance_errors.claim_taken(lost[0]) == (1, 1, True), lost[0]
    assert lance_errors.write_failure(lost[0]) is WriteFailure.FENCED, lost[0]
    assert isinstance(_native_error(region, lost[0]), FencedError)


@pytest.mark.s3
def test_lost_claim_answer(seaweed: Any) -> None:
    """The claim's manifest PUT is stored but its answer is lost: Lance reads its own claim as another's."""
    uri = f"s3://memwal-test/lost-claim-{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    lance.write_dataset(rows(1), uri, storage_options=options).initialize_mem_wal()
    region = str(uuid.uuid4())
    upstream = int(seaweed.endpoint.rsplit(":", 1)[1])
    claim_put = f"/_mem_wal/{region}/manifest/{region_manifest_name(1)}"
    with LoseOneResponse(upstream, method="PUT", path_part=claim_put) as proxy:
        proxied = lance.dataset(uri, storage_options={**options, "aws_endpoint": proxy.url, "timeout": "1s"})
        lost = claim_error(proxied, region)
    assert len(proxy.lost) == 1, proxy.lost
    assert lance_errors.claim_taken(lost) == (1, 1, False), lost
    assert lance_errors.write_failure(lost) is WriteFailure.CLAIM_UNANSWERED, lost
    assert isinstance(_native_error(region, lost), UncertainWriteError)
