"""memwal_core: the library behind memwal's services. No Dagster imports here.

The public API is what this package exports:

>>> from memwal_core import MemWalTable, merge, gc
>>> with MemWalTable.open("demo/table") as table:  # doctest: +SKIP
...     merged = merge(table)
...     collected = gc(table, dry_run=True)

Everything else is internal and may move. Names load on first use, so that
`import memwal_core` stays cheap for Spark executors and the CLI's `--help`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memwal_core.lance_log import quiet_lance_log
from memwal_core.process_memory import bound_process_memory

# The one place the version is written: pyproject.toml reads it from here, and `memwal --version`
# prints it without importlib.metadata (about 25 ms of every start).
__version__ = "0.1.0"

# Before anything imports lance: Lance reads its log settings once, when it loads.
quiet_lance_log()
bound_process_memory()

if TYPE_CHECKING:
    from memwal_core.errors import (
        BadInputError,
        ConflictError,
        CorruptMetadataError,
        EngineJobError,
        FencedError,
        MemwalError,
        StorageError,
    )
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.catchup import catchup
    from memwal_core.services.compact import compact
    from memwal_core.services.engine import LocalEngine, SparkEngine
    from memwal_core.services.gc.rules import GcPolicy
    from memwal_core.services.gc.service import gc
    from memwal_core.services.ingest.service import ingest
    from memwal_core.services.initialize import RegionSpecChoice, initialize
    from memwal_core.services.merge.batch import MergeBudget
    from memwal_core.services.merge.service import merge
    from memwal_core.services.reader import lsm_scanner, plan_read, point_lookup
    from memwal_core.services.retain import retain
    from memwal_core.services.snapshot.service import build_snapshot
    from memwal_core.services.spark_read import register_spark_source
    from memwal_core.services.status import status
    from memwal_core.services.writer import MemWalWriter, WriterOptions
    from memwal_core.storage.options import StorageOptions

# Public name -> the module that defines it.
_EXPORTS = {
    "MemWalTable": "memwal_core.model.table",
    "StorageOptions": "memwal_core.storage.options",
    "MemWalWriter": "memwal_core.services.writer",
    "WriterOptions": "memwal_core.services.writer",
    "status": "memwal_core.services.status",
    "initialize": "memwal_core.services.initialize",
    "RegionSpecChoice": "memwal_core.services.initialize",
    "merge": "memwal_core.services.merge.service",
    "MergeBudget": "memwal_core.services.merge.batch",
    "catchup": "memwal_core.services.catchup",
    "build_snapshot": "memwal_core.services.snapshot.service",
    "compact": "memwal_core.services.compact",
    "LocalEngine": "memwal_core.services.engine",
    "SparkEngine": "memwal_core.services.engine",
    "retain": "memwal_core.services.retain",
    "gc": "memwal_core.services.gc.service",
    "GcPolicy": "memwal_core.services.gc.rules",
    "ingest": "memwal_core.services.ingest.service",
    "plan_read": "memwal_core.services.reader",
    "register_spark_source": "memwal_core.services.spark_read",
    "lsm_scanner": "memwal_core.services.reader",
    "point_lookup": "memwal_core.services.reader",
    "MemwalError": "memwal_core.errors",
    "BadInputError": "memwal_core.errors",
    "ConflictError": "memwal_core.errors",
    "CorruptMetadataError": "memwal_core.errors",
    "EngineJobError": "memwal_core.errors",
    "FencedError": "memwal_core.errors",
    "StorageError": "memwal_core.errors",
}

__all__ = [
    "BadInputError",
    "ConflictError",
    "CorruptMetadataError",
    "EngineJobError",
    "FencedError",
    "GcPolicy",
    "LocalEngine",
    "MemWalTable",
    "MemWalWriter",
    "MemwalError",
    "MergeBudget",
    "RegionSpecChoice",
    "SparkEngine",
    "StorageError",
    "StorageOptions",
    "WriterOptions",
    "build_snapshot",
    "catchup",
    "compact",
    "gc",
    "ingest",
    "initialize",
    "lsm_scanner",
    "merge",
    "plan_read",
    "point_lookup",
    "register_spark_source",
    "retain",
    "status",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'memwal_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
