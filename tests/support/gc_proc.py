"""Child processes for GC tests.

`python -m tests.support.gc_proc gc URI` runs one GC with no grace period (the
kill -9 test kills it midway); `python -m tests.support.gc_proc write URI
REGION START COUNT` writes COUNT keys from START through Lance's native
writer in 10-row MemTables, one key per put, printing each acknowledged key.
"""

from __future__ import annotations

import json
import sys

import lance
import pyarrow as pa

from memwal_core.model.table import MemWalTable
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.gc.service import gc


def run_gc(uri: str) -> None:
    with MemWalTable.open(uri) as table:
        print("ready", flush=True)
        result = gc(table, dry_run=False, policy=GcPolicy(grace_seconds=0))
        print(json.dumps(result.to_json()), flush=True)


def write(uri: str, region: str, start: int, count: int) -> None:
    dataset = lance.dataset(uri)
    with dataset.mem_wal_writer(region, max_memtable_rows=10) as writer:
        for key in range(start, start + count):
            writer.put(pa.table({"id": [key], "v": [key * 10]}, schema=dataset.schema))
            print(key, flush=True)


def main() -> None:
    command, uri = sys.argv[1], sys.argv[2]
    if command == "gc":
        run_gc(uri)
    else:
        write(uri, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))


if __name__ == "__main__":
    main()
