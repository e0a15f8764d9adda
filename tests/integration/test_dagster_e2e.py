"""End to end: the Dagster daemon merges two tables by itself, and the UI shows them in Chromium.

A real dagster-webserver and dagster-daemon on 127.0.0.1 (tests/support/dagster.py),
sensors switched on through GraphQL as the UI's toggle does, generations written
by Lance's native writer before and while the daemon runs. The tables must end
equal to the model, every region must have its own base_table materialization,
and run records must show no two merge runs (rounds) of one table overlapping.
A third table, left to the UI test, must show in the browser a region behind
(with its pending generations) and, once merged, caught up; that
test saves the picture of the status asset's region view that the README shows.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.events import RunFailureReason
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.tags import RUN_FAILURE_REASON_TAG, WILL_RETRY_TAG

from memwal_core.model.table import MemWalTable
from memwal_core.services.status import status
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig
from memwal_pipelines.sensors import FLUSHED_SENSOR
from tests.support.browser import (
    ARTIFACTS,
    COMMUNITY_DIALOG,
    COMMUNITY_DIALOG_DELAY_MS,
    keep_for_readme,
    launch_browser,
)
from tests.support.dagster import DagsterDeployment
from tests.support.model import ModelTable, keyed_backlog_table

if TYPE_CHECKING:
    from playwright.sync_api import Page

TABLES = ("alpha", "beta")
SPARK_MIN = {"alpha": ", spark_min_rows: 0"}
# The table the UI test watches: its sensor starts switched off.
UI_TABLE = TableConfig(name="gamma", uri="gamma", sensor_interval_seconds=2, status_interval_seconds=1)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@dataclass(frozen=True)
class E2E:
    running: DagsterDeployment
    tables: dict[str, ModelTable]  # merged by the daemon in the first test
    ui_table: ModelTable
    ui_regions: list[str]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, connect_server: Any) -> Iterator[E2E]:
    """The daemon merges on the pipeline's default engine, Spark, through the warm Connect server: alpha's
    rounds on Spark (no threshold), beta's in the run's process (its rounds are under the default one)."""
    root = tmp_path_factory.mktemp("dagster-e2e")
    tables = {name: keyed_backlog_table(root / name)[0] for name in TABLES}
    ui_table, ui_regions = keyed_backlog_table(root / UI_TABLE.name)
    listing = root / "tables.yaml"
    listing.write_text(
        "tables:\n"
        + "".join(
            f"  - {{name: {n}, uri: '{t.uri}', sensor_interval_seconds: 2{SPARK_MIN.get(n, '')}}}\n"
            for n, t in tables.items()
        )
        + f"  - {{name: {UI_TABLE.name}, uri: '{ui_table.uri}', sensor_interval_seconds: "
        f"{UI_TABLE.sensor_interval_seconds}, status_interval_seconds: {UI_TABLE.status_interval_seconds}, "
        "sensors: false}\n"
    )
    with DagsterDeployment(listing, env={"MEMWAL_SPARK_REMOTE": connect_server.url}) as running:
        yield E2E(running, tables, ui_table, ui_regions)


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


def started_too_late(tags: Mapping[str, str]) -> bool:
    """Whether a failed run is one that did not start within run monitoring's start timeout (180 s in
    the shipped dagster.yaml), and that Dagster retries: what a host too loaded to start a run
    process in time leaves (seen twice on a shared 2-core machine; the tables still converged).
    A run worker that starts after its run failed does nothing, so the retry is the only round."""
    return tags.get(RUN_FAILURE_REASON_TAG) == RunFailureReason.START_TIMEOUT.value and (
        tags.get(WILL_RETRY_TAG) == "true"
    )


def test_daemon_merges_each_table_in_rounds_one_run_at_a_time(deployment: E2E) -> None:
    """The daemon merges both tables to the model, one merge run per table at a time. Every merge run
    succeeds, but for one that failed to start in time, which Dagster retries (`started_too_late`)."""
    running, tables = deployment.running, deployment.tables
    assert all(pending(t) > 0 for t in tables.values())
    assert running.start_sensor(FLUSHED_SENSOR) == "RUNNING"
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
        run = record.dagster_run
        if not run.job_name.endswith("_merge"):
            continue
        if run.status == DagsterRunStatus.FAILURE and started_too_late(run.tags):
            continue  # an overloaded host: failed by run monitoring, and retried by Dagster
        assert run.status == DagsterRunStatus.SUCCESS, f"merge run {run.run_id}: {run.status} {run.tags}"
        assert record.start_time is not None and record.end_time is not None
        by_table.setdefault(run.job_name, []).append((record.start_time, record.end_time))
    for job, spans in by_table.items():
        for (s1, e1), (s2, e2) in itertools.combinations(sorted(spans), 2):
            assert e1 <= s2, f"merge runs of {job} overlapped: {s1}-{e1} and {s2}-{e2}"
    materialized = {
        name: instance.get_materialized_partitions(AssetKey([name, "base_table"])) for name in TABLES
    }
    assert late in materialized["alpha"], "the flush written while the daemon ran was merged by a later round"
    assert sum(len(p) for p in materialized.values()) == 5, "two regions per table, plus the late one"
    for name, engine in (("alpha", "spark"), ("beta", "local")):
        events = instance.fetch_materializations(AssetKey([name, "base_table"]), limit=20).records
        # The merges' own materializations (the sensor's freshness stamps carry no figures).
        merges = [m.metadata for e in events if (m := e.asset_materialization) and "engine" in m.metadata]
        assert merges and {m["engine"].value for m in merges} == {engine}, name
        if engine == "local":
            assert all("< spark_min_rows 500,000" in str(m["engine_reason"].value) for m in merges)
    rounds = sum(len(spans) for spans in by_table.values())
    print(f"merge runs: {rounds} for 5 regions in 2 tables")


def show(page: Page, url: str, expected: list[str], screenshot: str, timeout: float = 60.0) -> None:
    """Open `url` and wait until the page shows every text in `expected` (reloading now and then)."""
    page.goto(url, wait_until="networkidle")
    page.wait_for_timeout(COMMUNITY_DIALOG_DELAY_MS)
    deadline = time.monotonic() + timeout
    reload_at = time.monotonic() + 10
    while time.monotonic() < deadline:
        body = page.inner_text("body")
        if all(text in body for text in expected):
            break
        if time.monotonic() > reload_at:
            page.reload(wait_until="networkidle")
            reload_at = time.monotonic() + 10
        time.sleep(0.5)
    page.screenshot(path=str(ARTIFACTS / screenshot))
    body = page.inner_text("body")
    missing = [text for text in expected if text not in body]
    assert not missing, f"{url} does not show {missing} (screenshot artifacts/{screenshot})"
    assert COMMUNITY_DIALOG not in body, f"{url}: Dagster's community dialog covers the page"


def region_row(page: Page, region: str) -> list[str]:
    """The cells of a region's row in the status asset's regions table."""
    row = page.locator("tr:not(:has(tr))", has_text=region)
    return [cell.strip() for cell in row.first.locator("td").all_inner_texts()] if row.count() else []


def test_ui_renders_the_asset_graph_and_a_region_partition(deployment: E2E) -> None:
    from playwright.sync_api import sync_playwright

    running, tables = deployment.running, deployment.tables
    with MemWalTable.open(tables["beta"].uri) as opened:
        regions = opened.region_ids()
    instance = instance_of(running)
    known = set(instance.get_dynamic_partitions("beta_regions"))
    instance.add_dynamic_partitions("beta_regions", [r for r in regions if r not in known])

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            show(
                page,
                f"{running.url}/locations/memwal_pipelines.definitions/asset-groups/beta",
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
                f"{running.url}/assets/beta/base_table?view=partitions&partition={regions[0]}",
                ["Partitions", regions[0], regions[1][:8]],
                "region-partition.png",
            )
        finally:
            browser.close()


def test_ui_shows_a_region_behind_with_its_backlog_then_caught_up(deployment: E2E) -> None:
    """The status asset's region view, in the browser: behind first, caught up once merged."""
    from playwright.sync_api import sync_playwright

    running, table, (early, late) = deployment.running, deployment.ui_table, deployment.ui_regions
    config = TableConfig(name=UI_TABLE.name, uri=table.uri)
    definitions = build_definitions([config])
    instance = instance_of(running)
    instance.add_dynamic_partitions(f"{config.name}_regions", [early, late])
    # `early` merged, `late` given a third pending generation; the status records both.
    table.write(late, [("put", [{"id": 1000 + k, "v": "third"} for k in range(8)])])
    for job, partition in (("merge", early), ("snapshot", None)):
        result = definitions.resolve_job_def(f"{config.name}_{job}").execute_in_process(
            instance=instance, partition_key=partition, run_config=QUIET
        )
        assert result.success
    status_page = f"{running.url}/assets/{config.name}/status"

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        try:
            # Wide enough for the whole regions table, full region ids included.
            page = browser.new_page(viewport={"width": 1920, "height": 1300})
            show(page, status_page, ["regions_table", "1 of 2 regions behind", late], "region-behind.png")
            assert region_row(page, late)[:3] == [late[:8], "behind", "3"], "state and pending generations"
            assert region_row(page, early)[:3] == [early[:8], "caught up", "0"]
            # The page down to the regions table: which asset, which tab, which section.
            row = page.locator("tr", has=page.get_by_text("regions_table", exact=True)).first.bounding_box()
            assert row is not None
            page.screenshot(
                path=str(ARTIFACTS / "region-view.png"),
                clip={"x": 0, "y": 0, "width": 1920, "height": row["y"] + row["height"] + 12},
            )
            keep_for_readme("region-view.png")

            # `late` merged (the location's sensors leave this table alone: `sensors: false`), the status recorded.
            for job, partition in (("merge", late), ("snapshot", None)):
                result = definitions.resolve_job_def(f"{config.name}_{job}").execute_in_process(
                    instance=instance, partition_key=partition, run_config=QUIET
                )
                assert result.success
            show(page, status_page, ["All 2 regions caught up"], "region-caught-up.png", timeout=180)
            assert region_row(page, late)[:3] == [late[:8], "caught up", "0"]
            # Its table-level numbers, plotted over time.
            page.get_by_role("button", name="Plots").click()
            plotted = ["regions_behind", "pending_bytes", "max_oldest_pending_age_seconds"]
            page.get_by_text(plotted[0], exact=True).first.wait_for(timeout=30_000)
            body = page.inner_text("body")
            assert all(label in body for label in plotted), "the status asset's plots"
        finally:
            browser.close()
    table.assert_merged()
