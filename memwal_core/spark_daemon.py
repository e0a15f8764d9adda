"""The Python daemon of memwal's Spark executors: pyarrow, lance and memwal's tasks imported once, before any fork.

Spark starts one daemon per executor (`spark.python.daemon.module`) and
forks a worker from it for each Python task slot; a worker imports what its
task needs. With pyspark's own daemon that is every fork paying for pyarrow,
lance and memwal again (about a second on a quiet core); forked from this
one, a worker finds them loaded, so the first task of a run costs what the
tenth does. Nothing here starts a thread Spark would have to fear at fork:
Arrow's allocator and OpenBLAS park theirs and take care of forking, and
Lance starts its runtime only when a task first uses it.
"""

from __future__ import annotations

import importlib

# What a merge, a compaction or an ingestion task imports on an executor.
PRELOADED = (
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.dataset",
    "lance",
    "pyspark.worker",
    "memwal_core.services.merge.collapse",
    "memwal_core.services.merge.staged",
    "memwal_core.services.compact",
    "memwal_core.services.ingest.staged",
)


def preload() -> None:
    for name in PRELOADED:
        importlib.import_module(name)


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
