"""`memwal metrics`: the exposition, its cost per read, and a real Prometheus scraping it with the shipped alerts.

The alert rules in docs/deploy/ are checked and unit-tested with `promtool`, then
evaluated by a live Prometheus (Debian's package) scraping the exporter every
second: the demo table falls behind, a region's merges keep failing, and both
alerts resolve once the table is merged; once the exporter stops, the alerts on
its target and on absent metrics are pending.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.services.merge.service import merge
from memwal_core.services.watch import TableWatch
from tests.support.cli import option_flags, run_cli
from tests.support.prometheus import ALERT_RULES, Exporter, PrometheusServer, prometheus_binary, wait_for
from tests.support.regions import write_regions

SECRET = "memwal-secret-never-shown"
DASHBOARD = ALERT_RULES.parent / "grafana-dashboard.json"


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The exposition's samples: metric name -> sorted labels -> value."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def total(found: dict[str, Any], name: str) -> float:
    return sum(found.get(name, {}).values())


def test_metrics_shows_the_demo_backlog_moving_with_a_merge(tmp_path: Path) -> None:
    uri = str(tmp_path / "demo")
    write_demo_table(uri)
    before = run_cli("metrics", uri)
    assert before.returncode == 0, before.stderr
    found = samples(before.stdout)
    assert total(found, "memwal_pending_generations") == 24
    assert len(found["memwal_pending_generations"]) == 3, "one sample per region"
    assert all(name.startswith("memwal_") for name in found)
    labels = {key for series in found.values() for labels in series for key, _value in labels}
    assert labels == {"table", "region", "service", "kind"}
    assert total(found, "memwal_pending_rows") > 0 and total(found, "memwal_pending_bytes") > 0
    assert "memwal_last_merge_success" not in found, "no merge has run on the table yet"

    merged = run_cli("merge", uri)
    assert merged.returncode == 0, merged.stderr
    after = samples(run_cli("metrics", uri).stdout)
    assert total(after, "memwal_pending_generations") == 0
    assert total(after, "memwal_merged_generation") == 24
    assert total(after, "memwal_oldest_pending_age_seconds") == 0
    assert after["memwal_last_merge_success"] == {(("table", uri),): 1.0}
    assert time.time() - after["memwal_last_merge_success_timestamp_seconds"][(("table", uri),)] < 120
    # Time travel to the versions before the merge still reads every generation: nothing to release.
    assert total(after, "memwal_gc_eligible_bytes") == 0
    # Every metric the shipped alert rules and dashboard name is one the exporter serves.
    served = {family.name for family in text_string_to_metric_families(run_cli("metrics", uri).stdout)}
    for shipped in (ALERT_RULES, DASHBOARD):
        named = set(re.findall(r"memwal_[a-z_]+", shipped.read_text())) - {"memwal_pipelines"}
        assert named and named <= served, f"{shipped.name} names {sorted(named - served)}"


def test_metrics_refuses_a_table_that_is_not_there_in_one_line(tmp_path: Path) -> None:
    done = run_cli("metrics", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "does not exist" in done.stderr
    bad = run_cli("metrics", str(tmp_path), "--listen", "nowhere")
    assert bad.returncode == 2 and "not HOST:PORT" in bad.stderr


def test_a_read_costs_one_request_per_unchanged_region(tmp_path: Path) -> None:
    """The sensor's read: after the first, an unchanged region costs one HEAD."""
    uri = str(tmp_path / "wide")
    write_demo_table(uri, regions=1)
    regions = 200
    write_regions(uri, {}, regions, generations=2)
    with MemWalTable.open(uri) as table:
        watch = TableWatch(table)
        first = watch.read()
        again = watch.read()
    assert len(again.regions) == regions + 1
    assert first.requests > 2 * regions, "the first read reads every manifest"
    # One HEAD per region, and a few per table: the next table version's HEAD, the region listing,
    # four outcome records and the oldest version's HEAD.
    assert again.requests <= regions + 1 + 8, again.requests
    assert [r.backlog for r in again.regions] == [r.backlog for r in first.regions]


def test_metrics_never_shows_a_credential(seaweed: Any, tmp_path: Path) -> None:
    options = seaweed.storage_options()
    uri = f"s3://memwal-test/metrics-{tmp_path.name}"
    write_demo_table(uri, options)
    done = run_cli("metrics", uri, *option_flags(options))
    assert done.returncode == 0, done.stderr
    assert total(samples(done.stdout), "memwal_pending_generations") == 24
    # A wrong secret: the table is unreadable (up 0), and neither secret shows anywhere.
    denied = run_cli("metrics", uri, *option_flags({**options, "aws_secret_access_key": SECRET}))
    assert denied.returncode == 1 and "cannot be read" in denied.stderr
    assert samples(denied.stdout)["memwal_table_up"] == {(("table", uri),): 0.0}
    for text in (done.stdout, done.stderr, denied.stdout, denied.stderr):
        assert SECRET not in text and options["aws_secret_access_key"] not in text


def test_promtool_checks_and_unit_tests_the_shipped_alert_rules() -> None:
    promtool = prometheus_binary("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(ALERT_RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "6 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", str(ALERT_RULES.with_suffix(".test.yml"))], capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def alert_regions(server: PrometheusServer, name: str) -> set[str]:
    return {a.get("region", "") for a in server.alerts() if a["alertname"] == name}


def test_prometheus_scrapes_the_exporter_and_the_alerts_fire_and_resolve(tmp_path: Path) -> None:
    uri = str(tmp_path / "demo")
    write_demo_table(uri)
    with MemWalTable.open(uri) as table:
        broken, *others = table.region_ids()
        victim = table.region_store(broken).read_latest().generations[0].path
    # Read the tables every second; behind once a generation is two seconds old.
    with (
        Exporter([uri], "--interval", "1", "--lag-threshold", "2") as exporter,
        PrometheusServer([exporter.target]) as server,
    ):
        assert wait_for(
            "24 pending generations scraped", lambda: server.value("sum(memwal_pending_generations)") == 24
        )
        wait_for("the table is behind", lambda: alert_regions(server, "MemwalTableBehind"))
        (behind,) = [a for a in server.alerts() if a["alertname"] == "MemwalTableBehind"]
        assert behind["table"] == uri

        # One region's oldest generation cannot be read: its merges fail, the others merge.
        region_dir = Path(uri) / "_mem_wal" / broken
        shutil.move(region_dir / victim, tmp_path / "aside")
        for _ in range(3):
            with MemWalTable.open(uri) as table:
                result = merge(table)
            assert [f.region for f in result.failures] == [broken]
        wait_for(
            "the failing region alerts", lambda: alert_regions(server, "MemwalRegionMergeFailing") == {broken}
        )
        assert server.value(f'memwal_pending_generations{{region="{others[0]}"}}') == 0
        assert server.value("memwal_last_merge_success") == 0

        shutil.move(tmp_path / "aside", region_dir / victim)
        with MemWalTable.open(uri) as table:
            assert not merge(table).failures
        wait_for("nothing pending", lambda: server.value("sum(memwal_pending_generations)") == 0)
        wait_for("every alert resolved", lambda: not server.alerts())
        assert server.value("memwal_last_merge_success") == 1
        assert server.value("memwal_region_merge_failures") == 0
        # A read of three regions costs a HEAD each and a handful per table (four outcome records among
        # them); the one that saw the last merge also its new version (a LIST, the details) and the merged
        # region's manifest.
        requests = server.value("memwal_read_requests")
        assert requests is not None and requests <= 3 + 10

        # The exporter stops: its scrape fails and its series go stale; both alerts wait out their `for`.
        exporter.stop()
        wait_for(
            "the exporter down and the metrics absent",
            lambda: (
                {a["alertname"] for a in server.alerts("pending")}
                >= {"MemwalExporterDown", "MemwalMetricsAbsent"}
            ),
        )


def test_the_merge_lag_is_served_as_of_the_last_read(tmp_path: Path) -> None:
    """Between reads the exporter serves what its last read saw: a generation merged since that read
    must not be reported as waiting longer and longer (it fired MemwalTableBehind in the chaos run for
    a table never behind: a stale reading's pending generation aged at every scrape)."""
    from memwal_core.cli.metrics import TablesCollector, WatchedTable
    from memwal_core.storage.options import StorageOptions

    uri = str(tmp_path / "demo")
    write_demo_table(uri)
    watched = WatchedTable(uri, StorageOptions({}))
    collector = TablesCollector([watched], interval=3600, lag_threshold=900, read_timeout=60)

    def ages() -> dict[str, float]:
        (family,) = [f for f in collector.collect() if f.name == "memwal_oldest_pending_age_seconds"]
        return {s.labels["region"]: s.value for s in family.samples}

    collector.refresh(None)
    first = ages()
    assert len(first) == 3 and all(age >= 0 for age in first.values())
    time.sleep(1.5)
    assert ages() == first, "no read since: the same figures"
    reading, _since = watched.served()
    assert reading is not None
    assert max(first.values()) == max(r.backlog.oldest_pending_age(reading.read_at) for r in reading.regions)
