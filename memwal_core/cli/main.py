"""Entry point of the `memwal` command.

Exit status: 0 success (including nothing to do), 1 the operation failed,
2 bad usage or bad input. Errors are one line on stderr; `--json` prints
exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from memwal_core.cli.progress import RegionProgress
from memwal_core.demo import write_demo_table
from memwal_core.errors import MemwalError
from memwal_core.services.gc.rules import DEFAULT_GRACE_SECONDS, GcPolicy
from memwal_core.services.gc.service import gc
from memwal_core.services.initialize import RegionSpecChoice, initialize
from memwal_core.services.merge.engine import make_engine
from memwal_core.services.merge.service import merge
from memwal_core.services.status import status
from memwal_core.storage.options import StorageOptions
from memwal_core.table import MemWalTable

log = logging.getLogger("memwal")

# A command returns its JSON payload, its text form and its exit status.
Outcome = tuple[dict[str, Any], str, int]
Command = Callable[[argparse.Namespace, MemWalTable], Outcome]


class _Parser(argparse.ArgumentParser):
    """argparse exits with status 2 on bad usage, which is what we want; keep its message to one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"memwal: error: {message} (see memwal {self.prog.split()[-1]} --help)\n")


def _cmd_status(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    result = status(table)
    return result.to_json(), result.to_text(), 0


def _cmd_init(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    spec = RegionSpecChoice(
        bucket_column=args.bucket,
        num_buckets=args.num_buckets,
        identity_column=args.identity,
        unsharded=args.unsharded,
    )
    keys = [c.strip() for value in args.primary_key for c in value.split(",") if c.strip()]
    result = initialize(table, keys, spec)
    return (
        result.to_json(),
        f"MemWAL enabled on {result.table} (version {result.version}, primary key {keys})",
        0,
    )


def _cmd_demo(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    if not table.store.is_dir("_versions"):
        log.info("writing a demo table with a backlog to %s", table.uri)
        write_demo_table(table.uri, table.storage_options)
    result = status(table)
    return result.to_json(), result.to_text(), 0


def _cmd_merge(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    engine = make_engine(args.engine, spark_master=args.spark_master)
    result = merge(
        table,
        regions=args.region or None,
        max_generations=args.max_generations,
        engine=engine,
        dry_run=args.dry_run,
        progress=RegionProgress(),
    )
    code = max((f.exit_code for f in result.failures), default=0)
    return result.to_json(), result.to_text(), code


def _cmd_gc(args: argparse.Namespace, table: MemWalTable) -> Outcome:
    policy = GcPolicy(grace_seconds=args.grace_seconds)
    result = gc(table, dry_run=args.dry_run, policy=policy, progress=RegionProgress())
    code = max((f.exit_code for f in result.failures), default=0)
    return result.to_json(), result.to_text(), code


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("table", help="table URI: a path, file://... or s3://bucket/prefix")
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
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "status", parents=[common], help="regions, merge progress and backlog; changes nothing"
    )
    p.set_defaults(run=_cmd_status)

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
    p.add_argument("--num-buckets", type=int, metavar="N", help="number of buckets, with --bucket")
    p.set_defaults(run=_cmd_init)

    p = sub.add_parser(
        "merge", parents=[common], help="merge pending flushed generations into the base table"
    )
    p.add_argument(
        "--region", action="append", default=[], metavar="UUID", help="only this region (repeatable)"
    )
    p.add_argument("--max-generations", type=int, metavar="N", help="merge at most N generations per region")
    p.add_argument(
        "--engine", choices=["local", "spark"], default="local", help="where generations are collapsed"
    )
    p.add_argument(
        "--spark-master", metavar="URL", help="Spark master (default: MEMWAL_SPARK_MASTER or local[*])"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(run=_cmd_merge)

    p = sub.add_parser("gc", parents=[common], help="delete what is provably no longer needed")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="S",
        help="delete a pruned generation's directory only S seconds after its pruning (default 3600)",
    )
    p.set_defaults(run=_cmd_gc)

    p = sub.add_parser(
        "demo", parents=[common], help="create a demo MemWAL table with a backlog, then show it"
    )
    p.set_defaults(run=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Lance logs warnings (such as "creating a new dataset") to stderr; keep stderr for our one-line errors.
    os.environ.setdefault("LANCE_LOG", "error")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        options = StorageOptions.parse(args.storage_option)
        with MemWalTable(args.table, options) as table:
            payload, text, code = args.run(args, table)
    except MemwalError as exc:
        print(f"memwal {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"memwal {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an unclassified failure: still one line, exit 1
        first = (str(exc).splitlines() or [""])[0][:300]
        print(f"memwal {args.command}: failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    print(json.dumps(payload, sort_keys=False) if args.json else text)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
