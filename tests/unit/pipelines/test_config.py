"""The table list: every key typed and checked when it loads, every refusal one line naming file, table, key."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from memwal_core.errors import BadInputError
from memwal_core.services.defaults import DEFAULT_GRACE_SECONDS
from memwal_pipelines.config import TableConfig, load_tables


def listing(tmp_path: Path, body: str) -> str:
    path = tmp_path / "tables.yaml"
    path.write_text(body)
    return str(path)


def test_defaults_and_every_key_of_the_docstring_example(tmp_path: Path) -> None:
    import memwal_pipelines.config as config

    example = config.__doc__.split("```yaml\n")[1].split("```")[0]  # type: ignore[union-attr]
    (table,) = load_tables(listing(tmp_path, example))
    assert table.name == "events" and table.merge_engine == "spark" and table.retain_keep_versions is None
    keys = [line for line in example.splitlines()[1:] if ":" in line and not line.strip().startswith("#")]
    documented = {line.split(":")[0].strip(" -") for line in keys}
    # A table names one Spark: the example names the remote's variable, the others in a comment.
    # `storage_options` is there to be refused.
    assert documented == {f.name for f in fields(TableConfig)} - {
        "max_generations_per_merge",
        "spark_master",
        "spark_remote",
        "storage_options",
    }
    assert "spark_master spark://" in example and "spark_remote sc://" in example
    bare = TableConfig(name="t", uri="/t")
    assert (bare.merge_engine, bare.gc_grace_seconds, bare.retain_older_than) == (
        "spark",
        DEFAULT_GRACE_SECONDS,
        "7d",
    )
    assert (bare.compaction_fragment_threshold, bare.compaction_max_tasks, bare.status_interval_seconds) == (
        64,
        8,
        60.0,
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{name: x, uri: /t, colour: red}", "table x: unknown key 'colour'"),
        (
            "{name: x, uri: /t, gc_grace: 1}",
            "table x: unknown key 'gc_grace' (did you mean 'gc_grace_seconds'?)",
        ),
        ("{name: x}", "table x: uri: missing (every table needs a name and a uri)"),
        ("{uri: /t}", "table #1: name: missing"),
        (
            "{name: 'bad-name', uri: /t}",
            "table bad-name: name: 'bad-name' must be letters, digits and underscores",
        ),
        (
            "{name: x, uri: /t, merge_engine: flink}",
            "table x: merge_engine: Input should be 'local' or 'spark'",
        ),
        (
            "{name: x, uri: /t, max_batch_rows: 0}",
            "table x: max_batch_rows must be at least 1, not 0",
        ),
        (
            "{name: x, uri: /t, max_batch_bytes: 0}",
            "table x: max_batch_bytes must be at least 1, not 0",
        ),
        (
            "{name: x, uri: /t, gc_grace_seconds: -1}",
            "table x: gc_grace_seconds must be a finite number from 0 to 315360000, not -1",
        ),
        (
            "{name: x, uri: /t, status_interval_seconds: -1}",
            "table x: status_interval_seconds must be a finite number at least 0, not -1",
        ),
        (
            "{name: x, uri: /t, status_interval_seconds: .inf}",
            "table x: status_interval_seconds must be a finite number",
        ),
        (
            "{name: x, uri: /t, status_interval_seconds: '60'}",
            "table x: status_interval_seconds: Input should be a valid number",
        ),
        (
            "{name: x, uri: /t, retain_older_than: 30m}",
            "table x: retain_older_than: must be at least 1:00:00, not 30m",
        ),
        (
            "{name: x, uri: /t, retain_older_than: 90}",
            "table x: retain_older_than: duration '90' is not a number with a unit",
        ),
        (
            "{name: x, uri: /t, compaction_fragment_threshold: 1}",
            "table x: compaction_fragment_threshold must be at least 2, not 1",
        ),
        (
            "{name: x, uri: /t, compaction_max_tasks: 0}",
            "table x: compaction_max_tasks must be at least 1, not 0",
        ),
        # Issue 28: what the CLI refuses, the list refuses too, in the same words.
        ("{name: x, uri: /t, gc_grace_seconds: .nan}", "table x: gc_grace_seconds must be a finite number"),
        (
            "{name: x, uri: /t, retain_keep_versions: 0}",
            "table x: retain_keep_versions must be at least 1, not 0",
        ),
        (
            "{name: x, uri: /t, compaction_target_rows: 0}",
            "table x: compaction_target_rows must be at least 1",
        ),
        (
            "{name: x, uri: /t, max_generations_per_merge: 0}",
            "table x: max_generations_per_merge must be at least 1",
        ),
        (
            "{name: x, uri: /t, sensor_interval_seconds: 0}",
            "table x: sensor_interval_seconds must be at least 1",
        ),
        (
            "{name: x, uri: /t, max_backlog_generations: -1}",
            "table x: max_backlog_generations must be at least 0",
        ),
        (
            "{name: x, uri: /t, max_pending_age_seconds: 30}",
            "table x: max_pending_age_seconds must be a finite number at least 60",
        ),
        ("{name: x, uri: /t, max_index_lag: -1}", "table x: max_index_lag must be at least 0"),
        (
            "{name: x, uri: /t, max_gc_backlog_generations: -1}",
            "table x: max_gc_backlog_generations must be at least 0",
        ),
        ("{name: x, uri: 'hdfs://b/t'}", "table x: uri: hdfs://b/t: storage scheme 'hdfs' is not supported"),
        ("{name: x, uri: 's3://'}", "table x: uri: the URI s3:// names no bucket"),
        ("{name: x, uri: 'file:///t?x=SeCrEt'}", "table x: uri: the URI file:///t has a query or fragment"),
        ("{name: x, uri: /t, max_index_lag: 2.5}", "table x: max_index_lag: Input should be a valid integer"),
        (
            "{name: x, uri: /t, max_backlog_generations: true}",
            "table x: max_backlog_generations: Input should be a valid integer",
        ),
        ("[x, y]", "table #1: not a mapping of keys to values"),
    ],
)
def test_a_bad_entry_is_one_line_naming_the_file_the_table_and_the_key(
    tmp_path: Path, entry: str, message: str
) -> None:
    path = listing(tmp_path, f"tables:\n  - {entry}\n")
    with pytest.raises(BadInputError) as refused:
        load_tables(path)
    text = str(refused.value)
    assert text.startswith(f"table list {path}: {message}"), text
    assert "\n" not in text


def test_the_list_itself(tmp_path: Path) -> None:
    for body, message in [
        ("tables: []\n", "has no `tables:` list"),
        ("other: 1\n", "has no `tables:` list"),
        ("tables:\n  - {name: x, uri: /t}\nextra: 1\n", "unknown key 'extra'"),
        ("tables:\n  - {name: x, uri: /t}\n  - {name: x, uri: /u}\n", "table x: name: names a table twice"),
        ("tables: [\n", "cannot be read"),
    ]:
        with pytest.raises(BadInputError, match=message):
            load_tables(listing(tmp_path, body))
    with pytest.raises(BadInputError, match="cannot be read"):
        load_tables(str(tmp_path / "missing.yaml"))


def test_numbers_read_as_text_where_text_is_meant_and_a_copy_is_checked_too(tmp_path: Path) -> None:
    (table,) = load_tables(listing(tmp_path, "tables:\n  - {name: x, uri: 2024, gc_grace_seconds: 0}\n"))
    assert table.uri == "2024" and table.gc_grace_seconds == 0.0
    with pytest.raises(ValidationError, match="compaction_max_tasks"):
        replace(table, compaction_max_tasks=0)


def test_a_uri_with_credentials_is_refused_without_echoing_them(tmp_path: Path) -> None:
    path = listing(tmp_path, "tables:\n  - {name: x, uri: 's3://AKIAEXAMPLE:SeCrEtVaLuE@bucket/t'}\n")
    with pytest.raises(BadInputError) as refused:
        load_tables(path)
    text = str(refused.value)
    assert "holds credentials" in text and "s3://***@bucket/t" in text, text
    assert "AKIAEXAMPLE" not in text and "SeCrEtVaLuE" not in text
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_file_uri_is_read_as_its_local_path(tmp_path: Path) -> None:
    (table,) = load_tables(listing(tmp_path, "tables:\n  - {name: x, uri: 'file:///data/my%20table/'}\n"))
    assert table.uri == "/data/my table"


def test_a_merge_runs_bound_comes_from_its_budget_and_tags_its_job() -> None:
    """The `dagster/max_runtime` that frees a dead merge run's slot, and the round's own end before it."""
    from memwal_pipelines.build import table_definitions
    from memwal_pipelines.jobs import MAX_RUNTIME_TAG, table_jobs
    from memwal_pipelines.keys import TableKeys

    budget = TableConfig(name="t", uri="/t", max_batch_bytes=400 << 20)
    # The run's start (120 s), then three batches of 400 MiB at 4 MiB/s.
    assert budget.merge_max_runtime() == 120 + 3 * 100
    assert budget.merge_round_seconds() == 200, "one batch's time before the bound"
    fixed = TableConfig(name="t", uri="/t", merge_max_runtime_seconds=60)
    assert (fixed.merge_max_runtime(), fixed.merge_round_seconds()) == (60, 1.0)
    assert table_jobs(TableKeys(budget), table_definitions(budget)).merge.tags[MAX_RUNTIME_TAG] == "420"


@pytest.mark.parametrize(
    ("first", "second"),
    [("/data/t", "file:///data/t/"), ("t", "./t/"), ("s3://lake/t/", "s3://lake/t")],
    ids=["path and file URI", "relative paths", "s3 with a trailing slash"],
)
def test_two_entries_for_one_table_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, second: str
) -> None:
    """Issue 48: one table listed twice would get two merge jobs, two pools and two GC schedules."""
    monkeypatch.chdir(tmp_path)
    path = listing(tmp_path, f"tables:\n  - {{name: a, uri: '{first}'}}\n  - {{name: b, uri: '{second}'}}\n")
    with pytest.raises(BadInputError) as refused:
        load_tables(path)
    assert str(refused.value).startswith(
        f"table list {path}: table b: uri: names the same table as table a ("
    ), str(refused.value)


def test_a_symbolic_link_to_a_listed_table_is_the_same_table(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "t")
    path = listing(
        tmp_path,
        f"tables:\n  - {{name: a, uri: '{tmp_path / 't'}'}}\n  - {{name: b, uri: '{tmp_path / 'link'}'}}\n",
    )
    with pytest.raises(
        BadInputError, match=f"table b: uri: names the same table as table a \\({tmp_path / 't'}\\)"
    ):
        load_tables(path)


def test_each_tables_jobs_are_resolved_against_its_own_assets() -> None:
    """Issue 48: resolved against every asset of the location, as Dagster does by default, the jobs of N
    tables took time in N squared (the load of 300 tables was mostly that)."""
    from memwal_pipelines.build import build_definitions
    from memwal_pipelines.jobs import TableJobs

    tables = [TableConfig(name=f"t{i}", uri=f"/t{i}", merge_engine="local") for i in range(3)]
    repository = build_definitions(tables).get_repository_def()
    for table in tables:
        for job in fields(TableJobs):
            graph = repository.get_job(f"{table.name}_{job.name}").asset_layer.asset_graph
            resolved_against = graph.source_asset_graph.get_all_asset_keys()  # type: ignore[attr-defined]
            assert {key.path[0] for key in resolved_against} == {table.name}, job.name


def test_every_other_job_is_bounded_too() -> None:
    """A catch-up, snapshot, checks or upkeep run whose worker died with its code server (bench/chaos.py
    kills the code server with its runs) stayed STARTED for good, holding its table's service slot,
    or every table's upkeep slot; each job's runs now carry the table's `max_runtime_seconds`."""
    from memwal_pipelines.build import table_definitions
    from memwal_pipelines.jobs import MAX_RUNTIME_TAG, table_jobs
    from memwal_pipelines.keys import TableKeys

    bounded = TableConfig(name="t", uri="/t", max_runtime_seconds=900)
    jobs = table_jobs(TableKeys(bounded), table_definitions(bounded))
    others = [job for job in jobs.all if job is not jobs.merge]
    assert {job.name: job.tags.get(MAX_RUNTIME_TAG) for job in others} == {job.name: "900" for job in others}
    assert TableConfig(name="t", uri="/t").max_runtime_seconds == 3600
    with pytest.raises(ValidationError, match="max_runtime_seconds must be at least 60"):
        TableConfig(name="t", uri="/t", max_runtime_seconds=30)
