"""`python -m memwal_pipelines demo [TABLE]`: the whole pipeline once, on the embedded default.

Creates the demo table (a backlog of flushed generations in three regions,
written by Lance's own MemWAL writer) if it is missing, then does in one
process what the daemon does over time, recording every run in a local
Dagster instance (DAGSTER_HOME, default the project root) so `dg dev`
shows them afterwards: one sensor tick (regions become partitions, backlogs
are observed), one merge run (a round over every region), then catch-up, snapshot,
compaction, retention, GC (its job runs the blocking LSM-consistency check
first) and the asset checks. Prints one line per run with its main figures,
then the table's status.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwal_core.cli.render import render
from memwal_core.demo import write_demo_table
from memwal_core.errors import MemwalError
from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_pipelines.build import build_definitions
from memwal_pipelines.component import MemWalTableComponent
from memwal_pipelines.config import DEFAULT_TABLE_URI, URI_ENV, TableConfig
from memwal_pipelines.sensors import FLUSHED_SENSOR
from memwal_pipelines.warm_spark import warm_spark

if TYPE_CHECKING:
    from dagster import Definitions

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The jobs after the merges, in the order the daemon's sensors and schedules would run them.
AFTER_MERGES = ("catchup", "snapshot", "compaction", "retention", "gc", "checks")
# Materialization figures a run's line shows, when its assets report them.
SHOWN = (
    "engine",
    "engine_reason",
    "generations_merged",
    "rows_upserted",
    "rows_deleted",
    "tombstones",
    "max_lag_after",
    "pending_generations",
    "fragments_before",
    "fragments_after",
    "rows_rewritten",
    "versions_removed",
    "oldest_retained_version",
    "generations_deleted",
    "bytes_deleted",
    "kept_retained_version",
    "kept_grace_period",
)


def _instance_home() -> Path:
    """DAGSTER_HOME, by default the project root, whose dagster.yaml is the embedded default.

    With DAGSTER_HOME the folder `dg dev` runs from, Dagster reads that dagster.yaml in place
    (a DAGSTER_HOME elsewhere makes `dg dev` warn that the project's "will not be used").
    A DAGSTER_HOME of the user's own gets a copy when it has none.
    """
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT)))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    return home


def _ui_hint(home: Path, table: Path) -> str:
    """The command that shows the recorded runs, runnable from the current folder.

    `dg` finds the project by its pyproject.toml from the folder it runs in, and the
    code location opens the default table relative to the project root.
    """
    words = [f"DAGSTER_HOME={home}"]
    if table.resolve() != PROJECT_ROOT / DEFAULT_TABLE_URI:
        words.append(f"{URI_ENV}={table.resolve()}")
    words += [os.path.relpath(Path(sys.executable).parent / "dg"), "dev", "-h", "127.0.0.1"]
    if not Path.cwd().resolve().is_relative_to(PROJECT_ROOT):
        words += ["--target-path", os.path.relpath(PROJECT_ROOT)]
    return " ".join(words)


# Dagster's console logger at ERROR: the demo prints its own summary (`--verbose` shows Dagster's logs).
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def demo_definitions(table: Path) -> tuple[TableConfig, Definitions]:
    """The demo table's component, as `dg dev` loads it from the defs folder, on the table at `table`."""
    from dagster import ComponentTree

    os.environ[URI_ENV] = str(table.absolute())
    tree = ComponentTree.for_project(path_within_project=PROJECT_ROOT / "memwal_pipelines")
    (component,) = (c for c in tree.get_all_components(MemWalTableComponent) if c.name == "demo")
    # Its definitions alone: the location's sensors would read the defs folder's other tables too.
    return component, build_definitions([component])


def run_once(table: TableConfig, definitions: Definitions, *, verbose: bool = False) -> list[str]:
    """Every job of `table` once, in order; returns one line per run."""
    from dagster import DagsterInstance, SensorResult, build_sensor_context

    from memwal_pipelines.keys import TableKeys

    keys = TableKeys(table)
    instance = DagsterInstance.get()
    sensor = definitions.resolve_sensor_def(FLUSHED_SENSOR)
    with build_sensor_context(instance=instance, resources=definitions.resources) as context:
        tick = sensor(context)
    assert isinstance(tick, SensorResult)
    for request in tick.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(keys.regions_name, list(request.partition_keys or []))
    for event in tick.asset_events:
        instance.report_runless_asset_event(event)
    lines = []
    # The sensor asks for one merge run: a round over every region (a partition range).
    runs = [("merge", dict(r.tags)) for r in tick.run_requests or []]
    runs += [(job, {}) for job in AFTER_MERGES]
    for job, tags in runs:
        result = definitions.resolve_job_def(f"{table.name}_{job}").execute_in_process(
            instance=instance, tags=tags, raise_on_error=False, run_config=None if verbose else QUIET
        )
        outcome = "ok" if result.success else "FAILED"
        lines.append(f"{job:<10}  {outcome:<6}  run {result.run_id}  {_figures(result)}")
    return lines


def _figures(result: Any) -> str:
    """A run's main figures, summed over the regions it materialized, and its check verdicts."""
    events = result.get_asset_materialization_events()
    partitions = {e.partition for e in events if e.partition}
    totals: dict[str, Any] = {}
    for event in events:
        for key in SHOWN:
            if key in event.materialization.metadata:
                value = event.materialization.metadata[key].value
                totals[key] = value if isinstance(value, str) else totals.get(key, 0) + value
    # `engine=local (1,766 rows < spark_min_rows 500,000)`: where the data work ran, and why there.
    reason = totals.pop("engine_reason", "named")
    if "engine" in totals and reason != "named":
        totals["engine"] = f"{totals['engine']} ({reason})"
    shown = [f"regions={len(partitions)}"] if partitions else []
    shown += [f"{key}={value}" for key, value in totals.items()]
    shown += [
        f"{check.check_name}={'passed' if check.passed else 'FAILED'}"
        for check in result.get_asset_check_evaluations()
    ]
    return " ".join(shown)


def _serve_spark(home: Path) -> int:
    """Hold the warm Spark Connect server until SIGINT or SIGTERM; runs of `dg dev` find it in `home`."""
    with warm_spark(home) as url:
        print(f"Spark Connect server {url} for the runs of {home}; Ctrl-C stops it", file=sys.stderr)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memwal_pipelines", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="create the demo table if missing, run the whole pipeline once")
    demo.add_argument("table", nargs="?", default=DEFAULT_TABLE_URI)
    demo.add_argument("--verbose", action="store_true", help="also show Dagster's own logs")
    sub.add_parser(
        "spark", help="run the warm Spark Connect server for `dg dev` in DAGSTER_HOME until Ctrl-C"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    try:
        if args.command == "demo" and not Path(args.table).joinpath("_versions").is_dir():
            print(f"writing the demo table {args.table} (a backlog in three regions)", file=sys.stderr)
            write_demo_table(args.table)
        home = _instance_home()
        if args.command == "spark":
            return _serve_spark(home)
        # No Spark is started: the demo's rounds are far below the Spark threshold, so they run in
        # process (a round over it would start a local session on first use).
        lines = run_once(*demo_definitions(Path(args.table)), verbose=args.verbose)
        for line in lines:
            print(line)
        with MemWalTable.open(args.table) as table:
            print(render(status(table)))
    except MemwalError as exc:
        print(f"memwal demo: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(
        f"runs recorded in {home}; see them with:\n  {_ui_hint(home, Path(args.table))}\n"
        "then open http://127.0.0.1:3000 (Runs; Lineage, group demo)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
