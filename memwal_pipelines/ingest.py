"""The ingestion job of one table: files into its regions through the MemWAL writer.

Run it from the UI's launchpad, a schedule or a sensor with the sources in
run config. It produces flushed generations, which the flushed-generations
sensor then sees and merges. One ingestion per table runs at a time
(`memwal/service` tag limit): two writers of one region fence each other.
"""

from typing import Any

from dagster import Config, JobDefinition, OpExecutionContext, Output, in_process_executor, job, op

from memwal_core.cli.render import render
from memwal_core.services.ingest.service import ingest
from memwal_core.services.writer import WriterOptions
from memwal_pipelines.assets import on_table, service_metadata
from memwal_pipelines.jobs import SERVICE_TAG
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.resources import MemWalResource


class IngestConfig(Config):
    """What to load and how; storage options for object-store sources are the table's (from its resource)."""

    sources: list[str]
    format: str | None = None
    engine: str = "local"
    durable_write: bool = True
    max_memtable_rows: int | None = None
    max_wal_flush_interval_ms: int | None = None


def ingest_job(keys: TableKeys) -> JobDefinition:
    """`{table}_ingest`: one op that runs `ingest` with the run's config."""
    name = keys.table.name

    @op(
        name=f"{name}_ingest_files",
        description="Read the sources, route rows to regions, write them through MemWalWriter.",
    )
    def ingest_files(
        context: OpExecutionContext, config: IngestConfig, memwal: MemWalResource
    ) -> Output[dict[str, Any]]:
        options = WriterOptions(
            durable_write=config.durable_write,
            max_memtable_rows=config.max_memtable_rows,
            max_wal_flush_interval_ms=config.max_wal_flush_interval_ms,
        )
        result = on_table(
            memwal,
            keys,
            "ingest",
            lambda table: ingest(
                table,
                config.sources,
                fmt=config.format,
                engine=memwal.engine(keys.table, config.engine),
                writer_options=options,
            ),
        )
        context.log.info(render(result))
        return Output(result.to_json(), metadata=service_metadata(result, regions=len(result.regions)))

    @job(
        name=f"{name}_ingest",
        executor_def=in_process_executor,
        tags={SERVICE_TAG: f"{name}:ingest"},
        description=f"Load files into {keys.table.uri} through the MemWAL writer.",
    )
    def ingest_table() -> None:
        ingest_files()

    return ingest_table
