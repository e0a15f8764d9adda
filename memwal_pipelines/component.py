"""One maintained table as a Dagster Component: `dg scaffold defs memwal_pipelines.MemWalTableComponent PATH`.

The component's attributes are the keys of a table (`TableConfig`, every one
typed and checked as in the MEMWAL_TABLES list) and may use Dagster's
templates (`"{{ env('EVENTS_URI') }}"`); credentials stay in the environment
variable `storage_options_env` names. It is registered through the
`dagster_dg_cli.registry_modules` entry point, so `dg list components` shows
it in any project that installed memwal.
"""

from __future__ import annotations

import functools
import re
from typing import Literal, Self

from dagster import (
    Component,
    ComponentLoadContext,
    Definitions,
    Resolvable,
    Scaffolder,
    ScaffoldRequest,
    scaffold_with,
)
from pydantic import BaseModel

from memwal_pipelines.build import location_definitions, table_definitions
from memwal_pipelines.config import TableConfig, refuse_twice


class TableScaffoldParams(BaseModel):
    """What `dg scaffold defs` may set (`--json-params`); everything else is the defaults, shown."""

    uri: str | None = None
    storage_options_env: str | None = None
    merge_engine: Literal["local", "spark"] = "spark"


def table_name(folder: str) -> str:
    """A table name (letters, digits, underscores, a letter first) from the folder the defs go in."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", folder).strip("_") or "table"
    return name if name[0].isalpha() else f"t_{name}"


DEFS_YAML = """\
# One table maintained by memwal: its merges, index catch-up, snapshots, compaction, retention and GC.
# Every key is described in memwal_pipelines/config.py (TableConfig); values may be templates such as
# "{{{{ env('EVENTS_URI') }}}}".
type: {type_name}

attributes:
  # The asset key prefix and the jobs' and sensors' names.
  name: {name}
  uri: {uri}
  # A JSON object of Lance storage options (credentials included) in this environment variable:
  # only its name reaches Dagster's run config, logs and metadata.
  storage_options_env: {storage_options_env}
  # spark (on the pipeline's warm Spark Connect server) or local (threads of the run's process).
  merge_engine: {merge_engine}
  # With merge_engine spark, a merge round or compaction below both of these runs in the run's own
  # process: Spark's fixed costs would outweigh it.
  spark_min_rows: {spark_min_rows}
  spark_min_bytes: {spark_min_bytes}
  # The budget of one merge commit; unset, a sixteenth of the machine's memory.
  max_batch_bytes: {max_batch_bytes}
  # Behind when a generation waits longer than this: the asset check, the FreshnessPolicy and the alerts.
  max_pending_age_seconds: {max_pending_age_seconds:g}
  sensor_interval_seconds: {sensor_interval_seconds}
  # Schedules (switched off until you switch them on in the UI's Automation page).
  snapshot_cron: "{snapshot_cron}"
  compaction_cron: "{compaction_cron}"
  retention_cron: "{retention_cron}"
  gc_cron: "{gc_cron}"
  checks_cron: "{checks_cron}"
"""

BUDGET_BYTES = 512 << 20


class MemWalTableScaffolder(Scaffolder[TableScaffoldParams]):
    """Writes a `defs.yaml` with one table: its URI, credentials variable, engine, budget and schedules."""

    @classmethod
    def get_scaffold_params(cls) -> type[TableScaffoldParams]:
        return TableScaffoldParams

    def scaffold(self, request: ScaffoldRequest[TableScaffoldParams]) -> None:
        name = table_name(request.target_path.name)
        defaults = TableConfig(name=name, uri=f"s3://bucket/{name}")
        params = request.params
        text = DEFS_YAML.format(
            type_name=request.type_name,
            name=name,
            uri=params.uri or defaults.uri,
            storage_options_env=params.storage_options_env or f"{name.upper()}_STORAGE_OPTIONS",
            merge_engine=params.merge_engine,
            spark_min_rows=defaults.spark_min_rows,
            spark_min_bytes=defaults.spark_min_bytes,
            max_batch_bytes=BUDGET_BYTES,
            max_pending_age_seconds=defaults.max_pending_age_seconds,
            sensor_interval_seconds=defaults.sensor_interval_seconds,
            snapshot_cron=defaults.snapshot_cron,
            compaction_cron=defaults.compaction_cron,
            retention_cron=defaults.retention_cron,
            gc_cron=defaults.gc_cron,
            checks_cron=defaults.checks_cron,
        )
        (request.target_path / "defs.yaml").write_text(text)


@scaffold_with(MemWalTableScaffolder)
class MemWalTableComponent(TableConfig, Component, Resolvable):
    """A Lance table with MemWAL that memwal maintains: its assets, checks, jobs, sensors and schedules."""

    # Where the component is declared (`memwal_pipelines/defs/demo[0]`), as Dagster names it; set when
    # Dagster loads it from its YAML, so that a refusal of two components names both.
    declared_in: str | None = None
    # The project's tables by name, set on each of them by the first that asks Dagster (which walks every
    # component: each asking made the load grow with the square of the tables).
    project_tables: tuple[MemWalTableComponent, ...] = ()

    @classmethod
    def load(cls, attributes: BaseModel | None, context: ComponentLoadContext) -> Self:
        component = super().load(attributes, context)
        where = context.component_path.get_display_key(context.project_root)
        object.__setattr__(component, "declared_in", where)  # the table's own keys are frozen
        return component

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        """The table's assets and checks; the first table (by name) of the project also brings every table's
        jobs and schedules and the location's sensors (Dagster allows one sensor of a name, and re-points a
        component's sensors and schedules only to the jobs of the same component), once it has refused two
        components for one table."""
        if not self.project_tables:
            found = context.component_tree.get_all_components(MemWalTableComponent)
            tables = tuple(sorted(found, key=lambda t: t.name)) or (self,)
            for table in tables:
                object.__setattr__(table, "project_tables", tables)
        tables = self.project_tables
        if tables[0] is not self:
            return self.own_definitions
        refuse_twice([(f"component {t.declared_in} (table {t.name})", t) for t in tables])
        own = [t.own_definitions for t in tables]
        return Definitions.merge(self.own_definitions, location_definitions(tables, own))

    @functools.cached_property
    def own_definitions(self) -> Definitions:
        """The table's assets and checks, built once: the first table's jobs are resolved against them."""
        return table_definitions(self)
