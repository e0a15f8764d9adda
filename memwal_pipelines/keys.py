"""The names Dagster knows one table's pieces by: asset keys, the region partitions, the GC gate check."""

from __future__ import annotations

from dataclasses import dataclass

from dagster import AssetCheckKey, AssetKey, DynamicPartitionsDefinition

from memwal_pipelines.config import TableConfig


@dataclass(frozen=True)
class TableKeys:
    """Asset keys and partitions of one table (assets are `{table}/{name}`)."""

    table: TableConfig

    @property
    def regions_name(self) -> str:
        return f"{self.table.name}_regions"

    @property
    def regions(self) -> DynamicPartitionsDefinition:
        return DynamicPartitionsDefinition(name=self.regions_name)

    def key(self, name: str) -> AssetKey:
        return AssetKey([self.table.name, name])

    @property
    def flushed(self) -> AssetKey:
        return self.key("flushed_generations")

    @property
    def base(self) -> AssetKey:
        return self.key("base_table")

    @property
    def indexes(self) -> AssetKey:
        return self.key("indexes")

    @property
    def snapshot(self) -> AssetKey:
        return self.key("region_snapshot")

    @property
    def status(self) -> AssetKey:
        return self.key("status")

    @property
    def compaction(self) -> AssetKey:
        return self.key("compaction")

    @property
    def retention(self) -> AssetKey:
        return self.key("retention")

    @property
    def gc_report(self) -> AssetKey:
        return self.key("gc_report")

    @property
    def consistency_check(self) -> AssetCheckKey:
        """The blocking check GC waits for."""
        return AssetCheckKey(self.base, "lsm_consistency")
