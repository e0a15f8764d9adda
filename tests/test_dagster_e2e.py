"""End to end: the Dagster daemon merges two tables by itself, and the UI shows them in Chromium.

A real dagster-webserver and dagster-daemon on 127.0.0.1 (tests/support/dagster.py),
sensors switched on through GraphQL as the UI's toggle does, generations written
by Lance's native writer before and while the daemon runs. The tables must end
equal to the model, every region must have its own base_table materialization,
and run records must show no two merge runs (rounds) of one table overlapping.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.instance.ref import InstanceRef

from memwal_core.services.status import status
from memwal_core.table import MemWalTable
from tests.support.dagster import DagsterDeployment
from tests.support.model import ModelTable, keyed_backlog_table

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TABLES = ("alpha", "beta")


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DagsterDeployment, dict[str, ModelTable]]]:
    root = tmp_path_factory.mktemp("dagster-e2e")
    tables = {name: keyed_backlog_table(root / name)[0] for name in TABLES}
    listing = root / "tables.yaml"
    listing.write_text(
        "tables:\n"
        + "".join(
            f"  - {{name: {n}, uri: '{t.uri}', sensor_interval_seconds: 2}}\n" for n, t in tables.items()
        )
    )
    with DagsterDeployment(listing) as running:
        yield running, tables


def pending(table: ModelTable) -> int:
    with MemWalTable.open(table.uri) as opened:
        return status(opened).pending_total


def instance_of(deployment: DagsterDeployment) -> DagsterInstance:
    return DagsterInstance.from_ref(InstanceRef.from_dir(str(deployment.home)))


def wait_until_merged(deployment: DagsterDeployment, tables: dict[str, ModelTable], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    instance = instance_of(deployment)
    busy = [
        DagsterRunStatus.QUEUED,
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
    ]
    while time.monotonic() < deadline:
        in_flight = instance.get_runs_count(RunsFilter(statuses=busy))
        if not in_flight and all(pending(t) == 0 for t in tables.values()):
            return
        time.sleep(1.0)
    failed = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
    raise AssertionError(
        f"not merged after {timeout:.0f} s: pending {[pending(t) for t in tables.values()]}, "
        f"failed runs {[r.run_id for r in failed]}; logs in {deployment.root}"
    )


def test_daemon_merges_each_table_in_rounds_one_run_at_a_time(
    deployment: tuple[DagsterDeployment, dict[str, ModelTable]],
) -> None:
    running, tables = deployment
    assert all(pending(t) > 0 for t in tables.values())
    for name in TABLES:
        assert running.start_sensor(f"{name}_flushed_generations") == "RUNNING"
    # A flush while the daemon is at work: the sensor must start a later round for it.
    time.sleep(3)
    late = tables["alpha"].write(None, [("put", [{"id": 9000 + i, "v": "late"} for i in range(5)])])
    wait_until_merged(running, tables, timeout=300)
    for table in tables.values():
        table.assert_merged()

    instance = instance_of(running)
    runs = instance.get_run_records(RunsFilter(tags={}))
    by_table: dict[str, list[tuple[float, float]]] = {}
    for record in runs:
        if not record.dagster_run.job_name.endswith("_merge"):
            continue
        assert record.dagster_run.status == DagsterRunStatus.SUCCESS
        assert record.start_time is not None and record.end_time is not None
        by_table.setdefault(record.dagster_run.job_name, []).append((record.start_time, record.end_time))
    for job, spans in by_table.items():
        for (s1, e1), (s2, e2) in itertools.combinations(sorted(spans), 2):
            assert e1 <= s2, f"merge runs of {job} overlapped: {s1}-{e1} and {s2}-{e2}"
    materialized = {
        name: instance.get_materialized_partitions(AssetKey([name, "base_table"])) for name in TABLES
    }
    assert late in materialized["alpha"], "the flush written while the daemon ran was merged by a later round"
    assert sum(len(p) for p in materialized.values()) == 5, "two regions per table, plus the late one"
    rounds = sum(len(spans) for spans in by_table.values())
    print(f"merge runs: {rounds} for 5 regions in 2 tables")


def test_ui_renders_the_asset_graph_and_a_region_partition(
    deployment: tuple[DagsterDeployment, dict[str, ModelTable]],
) -> None:
    from playwright.sync_api import Page, sync_playwright

    running, tables = deployment
    with MemWalTable.open(tables["beta"].uri) as opened:
        regions = opened.region_ids()
    instance = instance_of(running)
    known = set(instance.get_dynamic_partitions("beta_regions"))
    instance.add_dynamic_partitions("beta_regions", [r for r in regions if r not in known])

    def show(page: Page, path: str, expected: list[str], screenshot: str) -> None:
        page.goto(f"{running.url}{path}", wait_until="networkidle")
        skip = page.get_by_role("button", name="Skip")  # Dagster's first-visit newsletter dialog
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if skip.count():
                skip.click()
            body = page.inner_text("body")
            if all(text in body for text in expected):
                break
            time.sleep(0.5)
        page.screenshot(path=str(ARTIFACTS / screenshot))
        missing = [text for text in expected if text not in page.inner_text("body")]
        assert not missing, f"{path} does not show {missing} (screenshot artifacts/{screenshot})"

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            show(
                page,
                "/locations/memwal_pipelines.definitions/asset-groups/beta",
                [
                    "flushed_generations",
                    "base_table",
                    "indexes",
                    "region_snapshot",
                    "status",
                    "compaction",
                    "gc_report",
                ],
                "asset-graph.png",
            )
            show(
                page,
                f"/assets/beta/base_table?view=partitions&partition={regions[0]}",
                ["Partitions", regions[0], regions[1][:8]],
                "region-partition.png",
            )
        finally:
            browser.close()
