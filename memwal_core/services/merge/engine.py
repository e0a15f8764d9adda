"""Merge engines: how a region's pending generations become one collapsed source.

Both engines take the same plan and must give the same rows. `local` is
pyarrow in-process (no JVM); `spark` reads generations on executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pyarrow as pa

from memwal_core.errors import BadInputError
from memwal_core.services.merge.collapse import Collapsed, collapse_local
from memwal_core.services.merge.plan import RegionMergePlan


class MergeEngine(Protocol):
    """Turns a region plan into its merge source."""

    name: str

    def collapse(
        self,
        plan: RegionMergePlan,
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> Collapsed: ...


class LocalEngine:
    """pyarrow in the calling process: the baseline, and the engine for small work."""

    name = "local"

    def collapse(
        self,
        plan: RegionMergePlan,
        primary_key: tuple[str, ...],
        base_schema: pa.Schema,
        storage_options: Mapping[str, str],
    ) -> Collapsed:
        return collapse_local(plan.generations, plan.region, primary_key, base_schema, storage_options)


def make_engine(name: str, *, spark_master: str | None = None) -> MergeEngine:
    """The engine called `name` ("local" or "spark")."""
    if name == "local":
        return LocalEngine()
    if name == "spark":
        from memwal_core.services.merge.spark_engine import SparkEngine

        return SparkEngine(master=spark_master)
    raise BadInputError(f"unknown merge engine {name!r} (use local or spark)")
