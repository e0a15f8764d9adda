"""The consistency check of a table with nothing pending reads no data: the LSM read is the base table."""

from __future__ import annotations

import uuid
from typing import Any

import lance

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.consistency import check_consistency
from memwal_core.services.merge.service import merge
from tests.support.proxy import LatencyProxy


def test_an_idle_tables_check_passes_reading_no_data(seaweed: Any) -> None:
    uri = f"s3://memwal-test/idle-check-{uuid.uuid4().hex}"
    options = seaweed.storage_options()
    write_demo_table(uri, options, base_rows=4000, regions=2, rounds=2, rows_per_generation=20)
    dataset = lance.dataset(uri, storage_options=options)
    # Many data files: a check that scanned the base would read each of them.
    dataset.optimize.compact_files(target_rows_per_fragment=100)
    with MemWalTable.open(uri, options) as table:
        pending = check_consistency(table)
        assert pending.passed and pending.pending_generations > 0 and pending.sampled_keys > 0
        merge(table)
    port = int(seaweed.endpoint.rsplit(":", 1)[1])
    with LatencyProxy(port) as proxy, MemWalTable.open(uri, proxy.storage_options(options)) as table:
        proxy.reset()
        idle = check_consistency(table)
        requests = proxy.total()
        data_reads = proxy.naming(["/data/"])
    assert idle.passed and idle.pending_generations == 0 and idle.sampled_keys == 0
    assert idle.lsm_rows == idle.expected_rows == lance.dataset(uri, storage_options=options).count_rows()
    assert idle.explanation.startswith("nothing pending")
    assert data_reads == 0, proxy.lines
    assert requests < 30, proxy.lines
