"""Entry point of the `memwal` command.

Exit status: 0 success (including nothing to do), 1 the operation failed,
2 bad usage or bad input. Errors are one line on stderr; `--json` prints
exactly one JSON object on stdout.

Parsing the arguments imports nothing heavy (`--version`, `--help` and a
usage error answer in about the time Python takes to start); each command
imports the service it runs, and nothing of the others.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from memwal_core import __version__
from memwal_core.cli.options import count, listen_address, number
from memwal_core.errors import BadInputError, MemwalError, first_line, named, redact
from memwal_core.services.defaults import (
    AUTO,
    COMMIT_FORMS,
    DEFAULT_DELETION_THRESHOLD,
    DEFAULT_FENCE_RETENTION_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MAX_PENDING_AGE_SECONDS,
    DEFAULT_MAX_TASKS,
    DEFAULT_READ_INTERVAL,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SPARK_MIN_BYTES,
    DEFAULT_SPARK_MIN_ROWS,
    DEFAULT_TARGET_ROWS,
    ENGINES,
    MAX_GRACE_SECONDS,
    MAX_WAL_FLUSH_INTERVAL_MS,
    MIN_FENCE_RETENTION_SECONDS,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from memwal_core.model.table import MemWalTable
    from memwal_core.services.engine import Engine
    from memwal_core.services.result import Failure, ServiceResult

    # A command returns its result and its exit status; `main` prints the result as JSON or text.
    Outcome = tuple[ServiceResult, int]
    Command = Callable[[argparse.Namespace, MemWalTable], Outcome]

log = logging.getLogger("memwal")

# Commands that work on a table before it has MemWAL (every other one refuses such a table first).
WITHOUT_MEMWAL = ("init", "demo")


class _Parser(argparse.ArgumentParser):
    """argparse exits with status 2 on bad usage, which is what we want; keep its message to one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """argparse's own, but an argument it does not know is named only if it is close to a flag: the
        `SECRET` of `-o aws_secret_access_key SECRET` (a space for the `=`, unquoted) lands here."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            flags = _flags(self)
            self.error(f"unrecognized arguments: {' '.join(named(arg, flags) for arg in unknown)}")
        return parsed


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every flag of `parser` and of its commands."""
    flags: set[str] = set()
    for action in parser._actions:
        flags.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= _flags(command)
    return flags


def _cmd_status(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.status import status

    return status(table), 0


def _cmd_init(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.initialize import RegionSpecChoice, initialize

    spec = RegionSpecChoice(
        bucket_column=args.bucket,
        num_buckets=args.num_buckets,
        identity_column=args.identity,
        unsharded=args.unsharded,
    )
    keys = [c.strip() for value in args.primary_key for c in value.split(",") if c.strip()]
    return initialize(table, keys, spec), 0


def _cmd_demo(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.demo import write_demo_table
    from memwal_core.services.status import status

    if table.store.exists("") and not table.store.is_dir(""):
        raise BadInputError(f"{table.uri} is a file, not a directory for the demo table")
    if not table.store.is_dir("_versions"):
        log.info("writing a demo table with a backlog to %s", table.uri)
        write_demo_table(table.uri, table.storage_options)
    return status(table), 0


def _cmd_merge(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.cli.progress import RegionProgress
    from memwal_core.services.merge.batch import MergeBudget
    from memwal_core.services.merge.service import merge

    budget = MergeBudget.default(max_rows=args.max_batch_rows, max_bytes=args.max_batch_bytes)
    result = merge(
        table,
        regions=args.region or None,
        max_generations=args.max_generations,
        engine=_engine(args),
        budget=budget,
        commit_form=args.commit_form,
        dry_run=args.dry_run,
        progress=RegionProgress(),
    )
    return result, _failed_regions(args.command, result.failures)


def _failed_regions(command: str, failures: list[Failure]) -> int:
    """One error line per distinct error (one outage fails many regions alike); the exit status they call for."""
    from memwal_core.services.result import grouped

    for group in grouped(failures):
        print(f"memwal {command}: error: {group.message}", file=sys.stderr)
    return max((f.exit_code for f in failures), default=0)


def _cmd_catchup(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.catchup import catchup

    return catchup(table, indexes=args.index or None, rebuild=args.rebuild, dry_run=args.dry_run), 0


def _cmd_snapshot(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.snapshot.service import build_snapshot

    return build_snapshot(table, inline_threshold=args.inline_threshold, refresh_hints=args.refresh_hints), 0


def _cmd_compact(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.compact import compact

    result = compact(
        table,
        engine=_engine(args),
        target_rows_per_fragment=args.target_rows,
        deletion_threshold=args.deletion_threshold,
        max_tasks=args.max_tasks,
        dry_run=args.dry_run,
    )
    return result, 0


def _cmd_retain(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.services.retain import parse_duration, retain

    result = retain(
        table, older_than=parse_duration(args.older_than), keep_versions=args.keep_versions, force=args.force
    )
    return result, 0


def _engine_arguments(parser: argparse.ArgumentParser, what: str, *, per_round: bool = False) -> None:
    default = (
        "spark for a round worth it when a Spark URL is named"
        if per_round
        else "spark when a Spark URL is named"
    )
    parser.add_argument("--engine", choices=ENGINES, help=f"{what} (default: {default}, else local)")
    parser.add_argument(
        "--spark-master", metavar="URL", help="Spark master (default: MEMWAL_SPARK_MASTER or local[*,2])"
    )
    parser.add_argument(
        "--spark-remote",
        metavar="URL",
        help="Spark Connect server, sc://HOST:PORT (default: MEMWAL_SPARK_REMOTE); not with --spark-master",
    )
    if per_round:
        parser.add_argument(
            "--spark-min-rows",
            type=count(0),
            metavar="N",
            help="without --engine: a round of fewer rows (and fewer bytes than --spark-min-bytes) runs in "
            f"this process, not on Spark (default {DEFAULT_SPARK_MIN_ROWS:,}; 0: every round on Spark)",
        )
        parser.add_argument(
            "--spark-min-bytes",
            type=count(0),
            metavar="B",
            help=f"without --engine: see --spark-min-rows (default {DEFAULT_SPARK_MIN_BYTES:,})",
        )
    parser.add_argument("--verbose", action="store_true", help="also show Spark's own logs")


def _engine(args: argparse.Namespace) -> Engine:
    """The engine `--engine` names. Without it, threads of this process unless a Spark URL is named, on
    the command line or in MEMWAL_SPARK_MASTER / MEMWAL_SPARK_REMOTE, or a Spark threshold is given:
    then Spark for the rounds over the threshold (a merge's or a compaction's), this process for the rest."""
    from memwal_core.services.engine import SparkEngine, SparkThreshold, SparkWhereItPays, engine_named
    from memwal_core.spark_session import spark_target

    if args.engine == "local" and (args.spark_master or args.spark_remote):
        raise BadInputError("--spark-master and --spark-remote need --engine spark")
    minimum = getattr(args, "spark_min_rows", None), getattr(args, "spark_min_bytes", None)
    if args.engine and minimum != (None, None):
        raise BadInputError(
            "--spark-min-rows and --spark-min-bytes choose the engine per round: not with --engine"
        )
    master, remote = spark_target(args.spark_master, args.spark_remote)
    if (
        args.engine is None
        and hasattr(args, "spark_min_rows")
        and (master or remote or minimum != (None, None))
    ):
        rows, size = minimum
        threshold = SparkThreshold(
            DEFAULT_SPARK_MIN_ROWS if rows is None else rows,
            DEFAULT_SPARK_MIN_BYTES if size is None else size,
        )
        spark = SparkEngine(master=master, remote=remote, verbose=args.verbose)
        return SparkWhereItPays(spark, threshold)
    kind = args.engine or ("spark" if master or remote else "local")
    return engine_named(kind, spark_master=master, spark_remote=remote, verbose=args.verbose)


def _cmd_ingest(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.ingest.service import ingest
    from memwal_core.services.writer import WriterOptions

    options = WriterOptions(
        durable_write=not args.no_durable,
        max_memtable_rows=args.max_memtable_rows,
        max_wal_flush_interval_ms=args.wal_flush_interval_ms,
    )
    result = ingest(
        MemWalTable.open(table.uri, table.storage_options),
        args.source,
        fmt=args.format,
        engine=_engine(args),
        writer_options=options,
    )
    return result, 0


def _cmd_gc(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    from memwal_core.cli.progress import RegionProgress
    from memwal_core.services.gc.rules import GcPolicy
    from memwal_core.services.gc.service import gc

    policy = GcPolicy(grace_seconds=args.grace_seconds, fence_retention_seconds=args.fence_retention_seconds)
    result = gc(table, dry_run=args.dry_run, policy=policy, progress=RegionProgress())
    return result, _failed_regions(args.command, result.failures)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "table",
        help="table URI: a path, file://..., s3://bucket/prefix, az://container/prefix, abfss://... or gs://bucket/prefix",
    )
    common.add_argument(
        "-o",
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option passed to Lance and the object store (repeatable)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    parser = _Parser(prog="memwal", description="Maintenance services for Lance MemWAL tables.")
    parser.add_argument("--version", action="version", version=f"memwal {__version__}")
    # Also before the command; a subcommand's own --json default would overwrite a shared dest.
    parser.add_argument(
        "--json", dest="json_first", action="store_true", help="print one JSON object on stdout"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "status", parents=[common], help="regions, merge progress and backlog; changes nothing"
    )
    p.set_defaults(run=_cmd_status, service="memwal_core.services.status")

    p = sub.add_parser("init", parents=[common], help="enable MemWAL on an existing Lance table")
    p.add_argument(
        "--primary-key",
        action="append",
        required=True,
        metavar="COL",
        help="key column (repeatable)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--bucket", metavar="COL", help="hash-bucket regions by this column")
    mode.add_argument("--identity", metavar="COL", help="one region per value of this column")
    mode.add_argument("--unsharded", action="store_true", help="route every write to one region")
    p.add_argument(
        "--num-buckets", type=count(1, 2**31 - 1), metavar="N", help="number of buckets, with --bucket"
    )
    p.set_defaults(run=_cmd_init)

    p = sub.add_parser(
        "merge", parents=[common], help="merge pending flushed generations into the base table"
    )
    p.add_argument(
        "--region", action="append", default=[], metavar="UUID", help="only this region (repeatable)"
    )
    p.add_argument(
        "--max-generations", type=count(), metavar="N", help="merge at most N generations per region"
    )
    p.add_argument(
        "--max-batch-rows",
        type=count(),
        metavar="N",
        help="collapse at most N generation rows per commit (default: --max-batch-bytes / 256)",
    )
    p.add_argument(
        "--max-batch-bytes",
        type=count(),
        metavar="B",
        help="collapse at most B bytes of generations per commit (default: a sixteenth of the machine's memory)",
    )
    p.add_argument(
        "--commit-form",
        choices=COMMIT_FORMS,
        default=AUTO,
        help="how each batch commits: chosen per commit (auto), one commit with a delete clause (single), "
        "or a fenced delete commit then the marked upsert (two-step)",
    )
    _engine_arguments(p, "where generations are collapsed", per_round=True)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(run=_cmd_merge, service="memwal_core.services.merge.service")

    p = sub.add_parser("gc", parents=[common], help="delete what is provably no longer needed")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    p.add_argument(
        "--grace-seconds",
        type=number(0, MAX_GRACE_SECONDS),
        default=DEFAULT_GRACE_SECONDS,
        metavar="S",
        help="delete a pruned generation's directory only S seconds after its pruning (default 3600)",
    )
    p.add_argument(
        "--fence-retention-seconds",
        type=number(MIN_FENCE_RETENTION_SECONDS, MAX_GRACE_SECONDS),
        default=DEFAULT_FENCE_RETENTION_SECONDS,
        metavar="S",
        help="keep WAL entries and region manifest versions S seconds: a writer stalled for less stays "
        "fenced (default 604800, a week; at least a day)",
    )
    p.set_defaults(run=_cmd_gc, service="memwal_core.services.gc.service")

    p = sub.add_parser(
        "catchup", parents=[common], help="bring base-table indexes up to date with merged data"
    )
    p.add_argument(
        "--index", action="append", default=[], metavar="NAME", help="only this index (repeatable)"
    )
    p.add_argument("--rebuild", action="store_true", help="retrain lagging indexes instead of extending them")
    p.add_argument("--dry-run", action="store_true", help="only measure each index's lag")
    p.set_defaults(run=_cmd_catchup, service="memwal_core.services.catchup")

    p = sub.add_parser("snapshot", parents=[common], help="build the MemWAL index region snapshot")
    p.add_argument(
        "--inline-threshold",
        type=count(0),
        default=DEFAULT_INLINE_THRESHOLD,
        metavar="N",
        help=f"store the snapshot inline up to N regions, else in its own file (default {DEFAULT_INLINE_THRESHOLD})",
    )
    p.add_argument(
        "--refresh-hints",
        action="store_true",
        help="also refresh stale WAL position hints in region manifests (best effort, same epoch)",
    )
    p.set_defaults(run=_cmd_snapshot, service="memwal_core.services.snapshot.service")

    p = sub.add_parser("compact", parents=[common], help="compact the base table's fragments")
    _engine_arguments(p, "where Lance's rewrite tasks run", per_round=True)
    p.add_argument(
        "--target-rows",
        type=count(),
        default=DEFAULT_TARGET_ROWS,
        metavar="N",
        help="rows per fragment to aim at",
    )
    p.add_argument(
        "--deletion-threshold",
        type=number(0, 1),
        default=DEFAULT_DELETION_THRESHOLD,
        metavar="R",
        help="rewrite a fragment whose deleted share exceeds R (0..1)",
    )
    p.add_argument(
        "--max-tasks",
        type=count(),
        default=DEFAULT_MAX_TASKS,
        metavar="N",
        help="at most N rewrite tasks per run",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(run=_cmd_compact)

    p = sub.add_parser(
        "ingest", parents=[common], help="load files into the table's regions through the writer"
    )
    p.add_argument(
        "source",
        nargs="+",
        metavar="SOURCE",
        help="a file, a directory or a glob (local, s3://, az://, abfss:// or gs://)",
    )
    p.add_argument("--format", choices=["parquet", "csv", "json"], help="default: from the file extension")
    _engine_arguments(p, "where sources are read and regions written")
    p.add_argument(
        "--no-durable", action="store_true", help="acknowledge writes before their WAL entry is stored"
    )
    p.add_argument(
        "--max-memtable-rows", type=count(), metavar="N", help="rows per MemTable (and per write call)"
    )
    p.add_argument(
        "--wal-flush-interval-ms",
        type=count(1, MAX_WAL_FLUSH_INTERVAL_MS),
        metavar="MS",
        help="Lance's WAL flush interval",
    )
    p.set_defaults(run=_cmd_ingest)

    p = sub.add_parser("retain", parents=[common], help="remove old base-table versions (never tagged ones)")
    p.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 90m, 12h, 7d")
    p.add_argument("--keep-versions", type=count(), metavar="N", help="always keep the N newest versions")
    p.add_argument("--force", action="store_true", help="allow an age under one hour")
    p.set_defaults(run=_cmd_retain)

    p = sub.add_parser(
        "demo", parents=[common], help="create a demo MemWAL table with a backlog, then show it"
    )
    p.set_defaults(run=_cmd_demo)

    p = sub.add_parser(
        "metrics", help="the tables' backlog and service outcomes in Prometheus's text format, or served"
    )
    p.add_argument("tables", nargs="+", metavar="TABLE", help="table URI (repeatable)")
    p.add_argument(
        "-o",
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option for every table named (repeatable)",
    )
    p.add_argument(
        "--listen",
        type=listen_address,
        metavar="HOST:PORT",
        help="serve /metrics here instead of printing once",
    )
    p.add_argument(
        "--interval",
        type=number(0.1, 86_400),
        default=DEFAULT_READ_INTERVAL,
        metavar="S",
        help=f"read the tables at most once per S seconds, however often scraped (default {DEFAULT_READ_INTERVAL:g})",
    )
    p.add_argument(
        "--read-timeout",
        type=number(0.1, 86_400),
        default=DEFAULT_READ_TIMEOUT,
        metavar="S",
        help="a table whose read runs longer is down (memwal_table_up 0) until a read succeeds; "
        f"the other tables and the scrape do not wait for it (default {DEFAULT_READ_TIMEOUT:g})",
    )
    p.add_argument(
        "--lag-threshold",
        type=number(0, MAX_GRACE_SECONDS),
        default=DEFAULT_MAX_PENDING_AGE_SECONDS,
        metavar="S",
        help="merge lag above which a table is behind, exported for the alert rules "
        f"(default {DEFAULT_MAX_PENDING_AGE_SECONDS:g}, the pipeline's max_pending_age_seconds)",
    )
    p.add_argument(
        "--max-probe-interval",
        type=number(0, MAX_GRACE_SECONDS),
        metavar="S",
        help="read a quiet region at least once per S seconds: a change on it shows within S "
        "(default half the lag threshold, at least the interval: a new generation shows long before it is late)",
    )
    p.set_defaults(run=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0): argparse printed them
        return int(exc.code or 0)
    from memwal_core.model.table import MemWalTable
    from memwal_core.services.result import Failure
    from memwal_core.storage.object_store import side_call
    from memwal_core.storage.options import StorageOptions

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.command == "metrics":
        from memwal_core.cli.metrics import run_metrics

        return run_metrics(args)
    started = time.perf_counter()
    try:
        options = StorageOptions.parse(args.storage_option)
        with MemWalTable(args.table, options.for_service(args.command)) as table:
            # The command's modules load while the table is checked: the check waits on storage.
            with side_call(lambda: _check_table(table, args.command)) as checked:
                if getattr(args, "service", None):
                    importlib.import_module(args.service)
            checked.result()
            result, code = args.run(args, table)
            # The whole command's, its table check included: the store lives as long as the command.
            result = result.with_throttled(table.store.stats.throttling.lifetime())
    except MemwalError as exc:
        print(f"memwal {args.command}: error: {exc}", file=sys.stderr)
        return _failed(args, Failure.of(exc), started)
    except KeyboardInterrupt:
        print(f"memwal {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an unclassified failure: still one line, exit 1
        first = first_line(exc)
        print(f"memwal {args.command}: failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return _failed(args, Failure(None, f"{type(exc).__name__}: {first}"), started)
    return _report(args, result, code)


def _check_table(table: MemWalTable, command: str) -> None:
    """The table answers, and (but for `init` and `demo`) is a Lance table with MemWAL: checked before
    anything is written."""
    table.store.check_reachable()
    if command not in WITHOUT_MEMWAL:
        table.index_details()


def _failed(args: argparse.Namespace, failure: Failure, started: float) -> int:
    """The run failed as a whole: with --json, still one object, the failure under `failures` (region null)."""
    from memwal_core.services.result import FLOAT_DIGITS, to_jsonable

    if args.json or args.json_first:
        result = {
            "table": redact(args.table),
            "read_version": None,
            "new_version": None,
            "dry_run": bool(getattr(args, "dry_run", False)),
            "failures": [to_jsonable(failure)],
            "seconds": round(time.perf_counter() - started, FLOAT_DIGITS),
        }
        with contextlib.suppress(OSError):
            print(json.dumps(result))
    return failure.exit_code


def _report(args: argparse.Namespace, result: ServiceResult, code: int) -> int:
    """Print the result; the work is already done, so a reader that went away is not an error."""
    from memwal_core.cli.render import render

    try:
        as_json = args.json or args.json_first
        output = json.dumps(result.to_json(), allow_nan=False) if as_json else render(result)
        print(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # Later writes (and the interpreter's final flush) must not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError) as exc:
        print(f"memwal {args.command}: the result could not be printed: {exc}", file=sys.stderr)
        return max(code, 1)
    return code


def run() -> NoReturn:
    """The `memwal` command: `main`, then an exit that skips the interpreter's teardown. Once the result
    is printed nothing is left to do, and freeing every module and object (Lance, Arrow, pandas) took
    0.1-0.2 s of every command that loaded them."""
    _lean_process()
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _lean_process() -> None:
    """Spare a command process two costs of the libraries it loads, neither of which buys it anything
    (docs/width.md, "CPU per command"; 6-9% of `memwal gc`'s CPU at 1,000 regions):

    - numpy's OpenBLAS starts a thread per core that spins waiting for matrix work memwal never gives
      it (`OPENBLAS_NUM_THREADS`, read when numpy loads; a value the caller set is kept);
    - Python's cycle collector, run every 700 allocations by default, walks the young objects of
      thousands of request and manifest objects that are freed by reference counting anyway.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.freeze()  # what is loaded so far lives as long as the process: never walk it again
    gc.set_threshold(10_000, 20, 20)


if __name__ == "__main__":
    run()
