"""The README's writer and ingestion examples work on the demo table exactly as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import PROJECT_ROOT

BIN = Path(sys.executable).parent


def readme_block(language: str, containing: str) -> str:
    """The README's fenced `language` block that contains `containing`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", (PROJECT_ROOT / "README.md").read_text(), re.DOTALL)
    (block,) = [b for b in blocks if containing in b]
    return block


def test_writer_and_ingest_examples_on_the_demo_table(tmp_path: Path) -> None:
    import lance

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (args, done.stderr)
        return done

    run("memwal", "demo", "demo/table")
    shown = run(sys.executable, "-c", readme_block("python", "from memwal_core import GcPolicy")).stdout
    assert "24 pending generations" in shown and "24 generations merged" in shown
    run(sys.executable, "-c", readme_block("python", "from memwal_core import MemWalTable, lsm_scanner"))
    run(sys.executable, "-c", readme_block("python", 'MemWalWriter("demo/table"'))
    run("bash", "-euc", readme_block("bash", "memwal ingest demo/table"))
    run("memwal", "merge", "demo/table")
    rows = lance.dataset(str(tmp_path / "demo" / "table")).to_table().to_pydict()
    names = dict(zip(rows["id"], rows["name"], strict=True))
    assert (names[1], names[2], names[5], names[123456]) == ("x", "y", "five", "new")
    assert 17 not in names and 42 not in names
