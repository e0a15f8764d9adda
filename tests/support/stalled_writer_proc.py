"""A writer process to stop (SIGSTOP) and wake: Lance's native writer or `MemWalWriter`, one region.

`python -m tests.support.stalled_writer_proc KIND URI REGION` with KIND
`native` or `memwal` and the storage options as JSON in `STALLED_WRITER_OPTIONS`
(credentials stay off the command line). It claims REGION, makes one durable
put per key of `FIRST_KEYS`, prints `ready`, and waits for a line on stdin;
then it tries one durable put per key of `LATER_KEYS`, printing `ack KEY` or
`fail KEY ERROR` for each, and closes, printing `closed` or `close-failed ERROR`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lance
import pyarrow as pa

from memwal_core.services.writer import MemWalWriter
from tests.support.schema import key_field

OPTIONS_ENV = "STALLED_WRITER_OPTIONS"
SCHEMA = pa.schema([key_field("id", pa.int64()), pa.field("v", pa.string())])
FIRST_KEYS = range(5)
LATER_KEYS = range(100, 103)


def rows(key: int) -> pa.Table:
    return pa.table({"id": [key], "v": [f"a{key}"]}, schema=SCHEMA)


def open_writer(kind: str, uri: str, region: str, options: dict[str, str]) -> Any:
    """A durable writer that claims `region` now; the native one writes each put's WAL entry at once."""
    if kind == "native":
        dataset = lance.dataset(uri, storage_options=options or None)
        return dataset.mem_wal_writer(region, durable_write=True, max_wal_buffer_size=1)
    writer = MemWalWriter(uri, options or None, region=region, durable_write=True)
    writer.claim()
    return writer


def main() -> None:
    kind, uri, region = sys.argv[1:4]
    writer = open_writer(kind, uri, region, json.loads(os.environ.get(OPTIONS_ENV, "{}")))
    for key in FIRST_KEYS:
        writer.put(rows(key))
    print("ready", flush=True)
    sys.stdin.readline()
    for key in LATER_KEYS:
        try:
            writer.put(rows(key))
            print(f"ack {key}", flush=True)
        except Exception as exc:  # the outcome is the output
            print(f"fail {key} {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
    try:
        writer.close()
        print("closed", flush=True)
    except Exception as exc:
        print(f"close-failed {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    main()
