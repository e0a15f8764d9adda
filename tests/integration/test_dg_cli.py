"""The README's Dagster commands, from the project root: `dg check defs` and `dg dev`.

Run as the README has them: `.venv/bin/dg` without an activated venv, from the project
root with DAGSTER_HOME=$PWD, so the root dagster.yaml is read in place. Neither may print a warning that
does not apply (a dagster.yaml that "will not be used", a venv mismatch, an
integration's preview notice).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.dagster import LOCATION, location_loaded
from tests.support.paths import PROJECT_ROOT
from tests.support.service import LOOPBACK, free_ports, stop_process_group

DG = Path(sys.executable).parent / "dg"
# Dagster's own notice on the first start of a new instance's run-retry daemon.
FIRST_START = "No cursor for event type"


def readme_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A checkout of the project as the README uses it: `dg` runs from its root, DAGSTER_HOME=$PWD.

    The top-level files are copied and the packages and venv linked, so the instance Dagster
    creates stays out of the real checkout.
    """
    root = tmp_path / "memwal"
    root.mkdir()
    for name in ("pyproject.toml", "workspace.yaml", "dagster.yaml"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    for name in ("memwal_core", "memwal_pipelines", ".venv"):
        (root / name).symlink_to(PROJECT_ROOT / name)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MEMWAL_TABLES", "DAGSTER_HOME")}
    return root, {**env, "DAGSTER_HOME": str(root)}


def warnings_in(output: str) -> list[str]:
    return [line for line in output.splitlines() if "warning" in line.lower() and FIRST_START not in line]


def test_dg_check_defs_passes_from_the_project_root_without_warnings(tmp_path: Path) -> None:
    root, env = readme_env(tmp_path)
    proc = subprocess.run(
        [str(DG), "check", "defs"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All definitions loaded successfully." in proc.stdout
    assert not warnings_in(proc.stdout + proc.stderr), proc.stdout + proc.stderr


def test_dg_dev_serves_the_code_location_without_warnings(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    root, env = readme_env(tmp_path)
    log = tmp_path / "dg-dev.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(DG), "dev", "-h", LOOPBACK, "-p", str(port)],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while not location_loaded(f"http://{LOOPBACK}:{port}"):
            assert process.poll() is None, (
                f"dg dev exited with {process.returncode}: {log.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"dg dev did not serve {LOCATION}: {log.read_text()[-3000:]}"
            time.sleep(0.5)
    finally:
        stop_process_group(process)
    output = log.read_text()
    assert "Serving dagster-webserver" in output
    # What it says while it serves; stopping it races its code server's restart watch.
    serving = output.split("Shutting down Dagster services")[0]
    assert not warnings_in(serving), output
