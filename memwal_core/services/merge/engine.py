"""Merge engines: how a batch of region prefixes becomes one collapsed merge source.

Both engines take the same plans and must give the same rows. `local` is
pyarrow in-process (no JVM), regions in parallel threads; `spark` spreads
(region, key partition) units of every region in the batch over executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import pyarrow as pa

from memwal_core.errors import BadInputError
from memwal_core.services.merge.collapse import BatchCollapse, collapse_in_process
from memwal_core.services.merge.plan import RegionMergePlan


class MergeEngine(Protocol):
    """Turns the region prefixes of one batch into their merge source."""

    name: str

    def collapse_batch(
        self,
        plans: Sequence[RegionMergePlan],
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> BatchCollapse: ...


class LocalEngine:
    """pyarrow in the calling process: the baseline, and the engine for small work."""

    name = "local"

    def collapse_batch(
        self,
        plans: Sequence[RegionMergePlan],
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> BatchCollapse:
        return collapse_in_process(plans, primary_key, base_schema, storage_options)


def make_engine(name: str, *, spark_master: str | None = None) -> MergeEngine:
    """The engine called `name` ("local" or "spark")."""
    if name == "local":
        return LocalEngine()
    if name == "spark":
        from memwal_core.services.merge.spark_engine import SparkEngine

        return SparkEngine(master=spark_master)
    raise BadInputError(f"unknown merge engine {name!r} (use local or spark)")
