"""The command line refuses bad numbers before touching anything, and reports to any reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memwal_core.cli.main import main
from memwal_core.demo import write_demo_table
from tests.support.paths import PROJECT_ROOT
from tests.support.tables import tree_digest

# Every numeric option: (command, option, smallest valid value).
NUMERIC = [
    ("init", "--num-buckets", 1),
    ("merge", "--max-generations", 1),
    ("merge", "--max-batch-rows", 1),
    ("merge", "--max-batch-bytes", 1),
    ("gc", "--grace-seconds", 0),
    ("gc", "--fence-retention-seconds", 86_400),
    ("snapshot", "--inline-threshold", 0),
    ("compact", "--target-rows", 1),
    ("compact", "--deletion-threshold", 0),
    ("compact", "--max-tasks", 1),
    ("ingest", "--max-memtable-rows", 1),
    ("ingest", "--wal-flush-interval-ms", 1),
    ("retain", "--keep-versions", 0),
]
BAD = ["-1", "nan", "inf", "-inf", "1e309", "abc", "", "99999999999999999999999999"]
REQUIRED = {"init": ["--primary-key", "id"], "ingest": ["nothing.csv"], "retain": ["--older-than", "7d"]}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("cli") / "t")
    write_demo_table(uri, base_rows=50, regions=2, rounds=1, rows_per_generation=10)
    return uri


@pytest.mark.parametrize(("command", "option", "smallest"), NUMERIC)
def test_every_numeric_option_refuses_bad_values_before_anything(
    table: str, command: str, option: str, smallest: int, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_digest(Path(table))
    bad = [*BAD, str(smallest - 1)] if smallest > 0 else [*BAD, str(smallest - 0.5)]
    if command == "compact" and option == "--deletion-threshold":
        bad.append("1.5")
    for value in bad:
        assert main([command, table, *REQUIRED.get(command, []), option, value]) == 2, (option, value)
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and option in err, err
    assert tree_digest(Path(table)) == before, "a refused command changed the table"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )


def test_version_and_json_on_either_side_of_the_command(table: str) -> None:
    shown = run("--version")
    assert shown.returncode == 0 and shown.stdout.startswith("memwal ")
    before, after = run("--json", "status", table), run("status", table, "--json")
    assert before.returncode == after.returncode == 0
    timing = "seconds"  # the one field two reads of an unchanged table may disagree on
    assert {**json.loads(before.stdout), timing: 0} == {**json.loads(after.stdout), timing: 0}
    assert run("bogus").stderr.count("memwal memwal") == 0


def test_a_reader_that_goes_away_or_a_full_disk(table: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memwal_core.cli.main", "merge", table, "--dry-run", "--json"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `| head -c1`: the reader is gone before the report is printed
    err = proc.stderr.read()
    assert proc.wait() == 0 and "Traceback" not in err and "BrokenPipe" not in err
    with open("/dev/full", "w") as full:
        failed = subprocess.run(
            [sys.executable, "-m", "memwal_core.cli.main", "status", table],
            cwd=PROJECT_ROOT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        "memwal status: the result could not be printed: [Errno 28] No space left on device"
    ]


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (
            "aws_endpont=http://127.0.0.1:9",
            "unknown storage option 'aws_endpont' (did you mean 'aws_endpoint'?)",
        ),
        ("timeout=soon", "storage option timeout=*** is not a duration"),
        ("timeout=0s", "storage option timeout='0s' must be above 0"),
        (
            "client_retry_timeout=5s",
            "storage option client_retry_timeout='5s' is not a whole number of seconds",
        ),
        ("client_max_retries=-1", "storage option client_max_retries='-1' is not a whole number"),
    ],
)
def test_unknown_or_malformed_storage_options_are_refused(
    table: str, option: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_digest(Path(table))
    assert main(["status", table, "-o", option]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    if "unknown" in expected:
        assert "known options: " in err and "aws_endpoint" in err.split("known options: ")[1]
    assert tree_digest(Path(table)) == before
