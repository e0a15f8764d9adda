"""The Lance error texts of lost responses and of a lost claim race, provoked on a real S3 server and on Azurite.

Only an object store can lose a response after applying the request, and
only a proxy can hold a claim's PUT while another claim lands, so these
texts of `memwal_core.lance_errors` are tested here, not with the others in
tests/unit/test_lance_errors.py. Lance's retry, or the losing claim, meets
the stored object as S3's 412 or Azure's 409: the same texts either way.
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

# Runs a test on SeaweedFS and on Azurite (the server fixture's name is read from the parameter).
BOTH_STORES = pytest.mark.parametrize(("store", "server"), [("s3", "seaweed"), ("azure", "azurite")])


def rows(*ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": "x"} for i in ids], schema=KEYED_SCHEMA)


def new_table(server: Any, name: str) -> str:
    """A one-row table with MemWAL on `server` (a SeaweedServer or an AzuriteServer)."""
    uri = f"{server.scheme}://memwal-test/{name}-{uuid.uuid4().hex}"
    lance.write_dataset(rows(1), uri, storage_options=server.storage_options()).initialize_mem_wal()
    return uri


@BOTH_STORES
def test_lost_wal_put(store: str, server: str, request: pytest.FixtureRequest) -> None:
    """The WAL entry is stored but its PUT's answer is lost: Lance's retry finds the position taken."""
    found: Any = request.getfixturevalue(server)
    uri = new_table(found, "lost-put")
    region = str(uuid.uuid4())
    with LoseOneResponse(found.port, method="PUT", path_part=f"/_mem_wal/{region}/wal/") as proxy:
        # A request timeout of 1 s: the lost answer costs a second, not object_store's default 30.
        options = {**proxy.storage_options(found.storage_options()), "timeout": "1s"}
        proxied = lance.dataset(uri, storage_options=options)
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


@BOTH_STORES
def test_lost_claim_race(store: str, server: str, request: pytest.FixtureRequest) -> None:
    """Another claim lands between this claim's read of the newest manifest and its PUT: the PUT is refused."""
    found: Any = request.getfixturevalue(server)
    uri = new_table(found, "claim-race")
    options = found.storage_options()
    region = str(uuid.uuid4())
    claim_put = f"/_mem_wal/{region}/manifest/{region_manifest_name(1)}"
    with HoldOneRequest(found.port, method="PUT", path_part=claim_put) as proxy:
        proxied = lance.dataset(uri, storage_options=proxy.storage_options(options))
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


@BOTH_STORES
def test_lost_claim_answer(store: str, server: str, request: pytest.FixtureRequest) -> None:
    """The claim's manifest PUT is stored but its answer is lost: Lance reads its own claim as another's."""
    found: Any = request.getfixturevalue(server)
    uri = new_table(found, "lost-claim")
    region = str(uuid.uuid4())
    claim_put = f"/_mem_wal/{region}/manifest/{region_manifest_name(1)}"
    with LoseOneResponse(found.port, method="PUT", path_part=claim_put) as proxy:
        options = {**proxy.storage_options(found.storage_options()), "timeout": "1s"}
        proxied = lance.dataset(uri, storage_options=options)
        lost = claim_error(proxied, region)
    assert len(proxy.lost) == 1, proxy.lost
    assert lance_errors.claim_taken(lost) == (1, 1, False), lost
    assert lance_errors.write_failure(lost) is WriteFailure.CLAIM_UNANSWERED, lost
    assert isinstance(_native_error(region, lost), UncertainWriteError)
