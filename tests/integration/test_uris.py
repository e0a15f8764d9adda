"""Table and source URIs read in one place (issue 28, items 5, 8 and 11).

`memwal demo file:/ABS/PATH` used to write the table at /ABS/PATH (Lance) and
its region manifests under ./file:/ABS/PATH (memwal), then refuse the table;
a percent-encoded `file:///…%20…` did "not exist"; an empty source folder did
"not exist" either. With one key in several source files, the last file in
command-line order wins, as the README says.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from memwal_core.model.table import MemWalTable
from memwal_core.services.reader import lsm_scanner, plan_read


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, from `cwd` (where a misread `file:` URI would leave a `file:` folder)."""
    return subprocess.run(
        [sys.executable, "-m", "memwal_core.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_command_reads_a_file_uri_as_its_path(tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    table = tmp_path / "my tables" / "demo"
    uris = [
        f"file:{quote(str(table))}",
        f"file://{quote(str(table))}",
        f"file://localhost{quote(str(table))}",
    ]
    made = cli(work, "demo", uris[0], "--json")
    assert made.returncode == 0, made.stderr
    assert list(work.iterdir()) == [], "nothing written beside the command"
    assert (table / "_versions").is_dir() and (table / "_mem_wal").is_dir()
    for uri in uris:
        done = cli(work, "status", uri, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["table"] == str(table)
    source = tmp_path / "rows 1.csv"
    source.write_text("id,name,score\n5,five,5.0\n")
    ingested = cli(work, "ingest", uris[1], f"file://{quote(str(source))}", "--json")
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["rows_written"] == 1
    assert list(work.iterdir()) == []


def test_an_empty_source_folder_is_named_as_empty(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert cli(tmp_path, "demo", str(table)).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    done = cli(tmp_path, "ingest", str(table), str(empty))
    assert done.returncode == 2
    assert f"source folder {empty} holds no files" in done.stderr, done.stderr


def test_the_last_source_file_on_the_command_line_wins(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert cli(tmp_path, "demo", str(table)).returncode == 0
    first, second = tmp_path / "b.csv", tmp_path / "a.csv"  # command-line order is not path order
    first.write_text("id,name,score\n777001,from-b,1.0\n")
    second.write_text("id,name,score\n777001,from-a,2.0\n")
    done = cli(tmp_path, "ingest", str(table), str(first), str(second))
    assert done.returncode == 0, done.stderr
    with MemWalTable.open(str(table)) as opened:
        rows = lsm_scanner(opened, plan_read(opened)).filter("id = 777001").to_table().to_pylist()
    assert [row["name"] for row in rows] == ["from-a"]
