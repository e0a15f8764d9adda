"""Pure rules of memwal's Spark sessions: the session ids clients share, and Spark's errors in one line."""

from __future__ import annotations

import uuid

from memwal_core.spark_session import executor_error, shared_session_ids, with_session_id


def test_clients_of_one_server_derive_the_same_session_ids_and_the_hour_changes_only_the_fallback() -> None:
    now = 1_800_000_000.0
    ids = shared_session_ids("sc://10.0.0.5:15002", now)
    assert ids == shared_session_ids("sc://10.0.0.5:15002/;use_ssl=true", now + 1)
    assert all(uuid.UUID(i).version == 4 for i in ids) and ids[0] != ids[1]
    later = shared_session_ids("sc://10.0.0.5:15002", now + 3600)
    assert later[0] == ids[0] and later[1] != ids[1]
    assert shared_session_ids("sc://10.0.0.6:15002", now)[0] != ids[0]


def test_a_session_id_joins_the_url_parameters() -> None:
    assert with_session_id("sc://h:1", "x") == "sc://h:1/;session_id=x"
    assert with_session_id("sc://h:1/", "x") == "sc://h:1/;session_id=x"
    assert with_session_id("sc://h:1/;use_ssl=true", "x") == "sc://h:1/;use_ssl=true;session_id=x"


def test_a_worker_that_could_not_start_is_named_in_one_line() -> None:
    spark_text = (
        "Job aborted due to stage failure: Task 0 in stage 0.0 failed 2 times: org.apache.spark.SparkException: \n"
        "Error from python worker:\n"
        "  /opt/venv/bin/python: No module named memwal_core.spark_daemon\n"
        "PYTHONPATH was:\n  /opt/spark/python\n"
        "org.apache.spark.SparkException: EOFException occurred while reading the port number\n"
        "\tat java.lang.Thread.run(Thread.java:840)\n"
    )
    assert executor_error(Exception(spark_text)) == (
        "Python workers did not start: /opt/venv/bin/python: No module named memwal_core.spark_daemon"
    )
