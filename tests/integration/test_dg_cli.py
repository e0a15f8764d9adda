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
import time
from pathlib import Path

import yaml

from tests.support.dagster import DG, LOCATION, location_loaded, new_project
from tests.support.paths import PROJECT_ROOT
from tests.support.service import LOOPBACK, free_ports, start_server, stop_process_group

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
        process = start_server(
            [str(DG), "dev", "-h", LOOPBACK, "-p", str(port)],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
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


def dg(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(DG), *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_new_project_lists_scaffolds_and_loads_the_component(tmp_path: Path) -> None:
    """A Dagster project of its own with memwal installed: `dg list components`, `dg scaffold defs`, `dg check defs`."""
    root, env = new_project(tmp_path)

    assert "memwal_pipelines.MemWalTableComponent" in dg(root, env, "list", "components")
    params = '{"uri": "s3://lake/events", "merge_engine": "local"}'
    dg(
        root,
        env,
        "scaffold",
        "defs",
        "memwal_pipelines.MemWalTableComponent",
        "events",
        "--json-params",
        params,
    )
    written = yaml.safe_load((root / "shop" / "defs" / "events" / "defs.yaml").read_text())
    assert written["type"] == "memwal_pipelines.MemWalTableComponent"
    attributes = written["attributes"]
    assert (attributes["name"], attributes["uri"], attributes["merge_engine"]) == (
        "events",
        "s3://lake/events",
        "local",
    )
    assert attributes["storage_options_env"] == "EVENTS_STORAGE_OPTIONS"
    assert attributes["max_batch_bytes"] > 0 and attributes["gc_cron"] and attributes["snapshot_cron"]

    assert "All definitions loaded successfully." in dg(root, env, "check", "defs")
    listed = dg(root, env, "list", "defs", "--json")
    assert (
        "events_merge" in listed and "memwal_flushed_generations" in listed and "events/base_table" in listed
    )

    # A bad key is refused when the definitions load, naming the key.
    (root / "shop" / "defs" / "events" / "defs.yaml").write_text(
        yaml.safe_dump({**written, "attributes": {**attributes, "max_batch_bytes": 0}})
    )
    refused = subprocess.run([str(DG), "check", "defs"], cwd=root, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "max_batch_bytes must be at least 1" in refused.stdout + refused.stderr


def test_two_components_for_one_table_fail_the_load_naming_both(tmp_path: Path) -> None:
    """Issue 48: `/x` and `file:///x/` are one table; two components for it would give it two merge jobs,
    two pools and two GC schedules. The load refuses it, naming both components and the key."""
    root, env = new_project(tmp_path)
    table = tmp_path / "x"
    for name, uri in (("events", str(table)), ("events_again", f"file://{table}/")):
        (root / "shop" / "defs" / name).mkdir()
        (root / "shop" / "defs" / name / "defs.yaml").write_text(
            yaml.safe_dump(
                {"type": "memwal_pipelines.MemWalTableComponent", "attributes": {"name": name, "uri": uri}}
            )
        )
    refused = subprocess.run([str(DG), "check", "defs"], cwd=root, env=env, capture_output=True, text=True)
    assert refused.returncode != 0
    assert (
        "component shop/defs/events_again[0] (table events_again): uri: names the same table as "
        f"component shop/defs/events[0] (table events) ({table})" in refused.stdout + refused.stderr
    ), refused.stdout + refused.stderr
