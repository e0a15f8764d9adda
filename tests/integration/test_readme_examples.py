"""The README's Python, writer and ingestion examples (and the read example in docs/internals.md) work
on the demo table as written.

They name their files under /tmp, so they run from any folder; here each run gets its own
folder instead (the one change made to them), so parallel runs never share a table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import PROJECT_ROOT

BIN = Path(sys.executable).parent
# The paths the examples write; replaced by the test's own.
TABLE, ROWS = "/tmp/memwal-demo", "/tmp/memwal-rows.csv"


def doc_block(language: str, containing: str, page: str = "README.md") -> str:
    """The fenced `language` block of `page` that contains `containing`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", (PROJECT_ROOT / page).read_text(), re.DOTALL)
    (block,) = [b for b in blocks if containing in b]
    return block


def test_writer_and_ingest_examples_on_the_demo_table(tmp_path: Path) -> None:
    import lance

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    table, rows_csv = str(tmp_path / "memwal-demo"), str(tmp_path / "memwal-rows.csv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [a.replace(TABLE, table).replace(ROWS, rows_csv) for a in args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done

    run("memwal", "demo", TABLE)
    python_example = doc_block("python", "from memwal_core import GcPolicy")
    shown = run(sys.executable, "-c", python_example).stdout
    assert shown.strip() == doc_block("console", "generations merged").strip(), "the README's sample output"
    run(sys.executable, "-c", doc_block("python", "lsm_scanner(table", "docs/internals.md"))
    run(sys.executable, "-c", doc_block("python", f'MemWalWriter("{TABLE}"'))
    run("bash", "-euc", doc_block("bash", f"memwal ingest {TABLE}"))
    run("memwal", "merge", TABLE)
    rows = lance.dataset(table).to_table().to_pydict()
    names = dict(zip(rows["id"], rows["name"], strict=True))
    assert (names[1], names[2], names[5], names[123456]) == ("x", "y", "five", "new")
    assert 17 not in names and 42 not in names
    assert os.listdir(elsewhere) == [], "the examples write nothing into the folder they run from"
