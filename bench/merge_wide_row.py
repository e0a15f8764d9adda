"""Benchmark: the peak memory of `memwal merge` of one wide row (docs/merge.md, "One wide row").

One region over a one-row base on local disk, with one pending generation of
one row whose `large_binary` value is SIZE bytes of random data (which no
encoding shrinks). `memwal merge` and, for the floor, `memwal status` each run
in their own process, which reports its own peak resident memory (VmHWM).

Usage: python bench/merge_wide_row.py [--sizes 1e6,25e6,50e6,100e6] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memwal_core.services.writer import MemWalWriter
from tests.support.peak_rss import command_peak_mib

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={"lance-schema:unenforced-primary-key": "true"}),
        pa.field("blob", pa.large_binary()),
    ]
)


def wide_row_table(root: Path, size: int) -> str:
    """A MemWAL table under `root` whose one region holds one pending row of `size` bytes."""
    uri = str(root / "t")
    lance.write_dataset(pa.table({"id": [0], "blob": [b"x"]}, schema=SCHEMA), uri).initialize_mem_wal()
    with MemWalWriter(uri, region=str(uuid.uuid4())) as writer:
        writer.put(pa.table({"id": [1], "blob": [os.urandom(size)]}, schema=SCHEMA))
    return uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e6,25e6,50e6,100e6", help="row sizes in bytes, comma-separated")
    parser.add_argument("--dir", type=Path, help="where the tables go (default: a temp dir, removed)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="memwal-wide-row-"))
    try:
        for size in (int(float(s)) for s in args.sizes.split(",")):
            root = work / str(size)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            uri = wide_row_table(root, size)
            floor, _ = command_peak_mib(root, "status", uri)
            peak, _ = command_peak_mib(root, "merge", uri)
            print(f"row {size / 1e6:g} MB: merge {peak} MiB (status {floor} MiB)", flush=True)
            shutil.rmtree(root)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
