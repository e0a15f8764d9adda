"""`memwal` imports only what the command runs (issue 35, item 3).

Every start used to import every service, pyarrow.compute, numpy and urllib3
before parsing its arguments: `memwal --version` took a second. Each case
here runs the real entry point in a fresh interpreter and lists the modules
it ended with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memwal_core.demo import write_demo_table
from memwal_core.storage.options import StorageOptions
from tests.support.paths import PROJECT_ROOT

# Libraries a start that runs no command (or reads a status) has no use for.
HEAVY = (
    "lance",
    "pyarrow",
    "pandas",
    "numpy",
    "obstore",
    "google.protobuf",
    "botocore",
    "urllib3",
    "dagster",
)
RUN = """
import json, sys
from memwal_core.cli.main import main
try:
    code = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


def modules_after(args: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    """The exit status of `memwal *args` and every module it imported."""
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(listing), *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=300,
    )
    return done.returncode, set(json.loads(listing.read_text()))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


@pytest.mark.parametrize(
    ("args", "code"),
    [(["--version"], 0), (["--help"], 0), (["merge", "--help"], 0), (["nosuchcommand"], 2), (["status"], 2)],
    ids=["version", "help", "command-help", "unknown-command", "missing-table"],
)
def test_parsing_imports_nothing_heavy(tmp_path: Path, args: list[str], code: int) -> None:
    status, modules = modules_after(args, tmp_path)
    assert status == code
    assert not loaded(modules, HEAVY)
    assert not [
        m for m in modules if m.startswith("memwal_core.services.") and m != "memwal_core.services.defaults"
    ]


def test_status_of_a_local_table_loads_neither_lance_nor_the_other_services(tmp_path: Path) -> None:
    table = tmp_path / "demo"
    write_demo_table(str(table), StorageOptions(), base_rows=50, regions=2, rounds=1)
    status, modules = modules_after(["status", "--json", str(table)], tmp_path)
    assert status == 0
    assert not loaded(modules, ("lance", "pandas", "dagster"))
    assert (
        "memwal_core.services.merge.service" not in modules
        and "memwal_core.services.gc.service" not in modules
    )


def test_a_command_preloads_the_service_it_runs() -> None:
    """Each command that names its service (loaded while the table is checked) names a real module, and
    the one its own code imports: a stale name would load a module for nothing."""
    import importlib.util
    import inspect

    from memwal_core.cli.main import build_parser

    parser = build_parser()
    named = {}
    for command in ("status", "merge", "gc", "catchup", "snapshot"):
        args = parser.parse_args([command, "t"])
        named[command] = args.service
        assert importlib.util.find_spec(args.service) is not None, args.service
        assert f"from {args.service} import" in inspect.getsource(args.run), (command, args.service)
    assert len(set(named.values())) == len(named)


LEAN = """
import gc, json, os, sys
from memwal_core.cli.main import _lean_process
_lean_process()
import numpy  # OpenBLAS reads its thread count as numpy loads
print(json.dumps([os.environ["OPENBLAS_NUM_THREADS"], gc.get_threshold()[0], gc.get_freeze_count() > 0]))
"""


@pytest.mark.parametrize(("given", "kept"), [(None, "1"), ("3", "3")], ids=["unset", "set-by-caller"])
def test_the_command_process_spares_blas_threads_and_young_collections(given: str | None, kept: str) -> None:
    """`memwal` runs with one OpenBLAS thread (unless the caller chose a count) and a cycle collector
    that walks young objects every 10,000 allocations, not 700, and never the modules loaded at start."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run(
        [sys.executable, "-c", LEAN], capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [kept, 10_000, True]
