"""No credential appears in any message: ours, or Lance's echoed back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memwal_core.errors import NotFoundError, redact
from tests.support.paths import PROJECT_ROOT

SECRET = "SUPERSECRET123"


@pytest.mark.parametrize(
    "text",
    [
        f"Error performing GET http://user:{SECRET}@127.0.0.1:9/bucket?list-type=2",
        f"s3://key:{SECRET}@bucket/t",
        f"https://h/b/o?X-Amz-Credential=AKIA&X-Amz-Signature={SECRET}&x=1",
        f"options {{'aws_secret_access_key': '{SECRET}', 'region': 'x'}}",
        f'{{"aws_session_token": "{SECRET}"}}',
        f"password={SECRET} token: {SECRET}",
    ],
)
def test_redact_removes_every_credential_form(text: str) -> None:
    assert SECRET not in redact(text)
    assert "***" in redact(text)


def test_redact_keeps_what_names_the_fault() -> None:
    text = "table s3://bucket/t has no region 89ae7b03 (at http://127.0.0.1:9/bucket)"
    assert redact(text) == text
    assert SECRET not in str(NotFoundError(f"cannot open http://u:{SECRET}@host/t"))


@pytest.mark.parametrize("command", ["status", "gc", "merge", "compact"])
def test_an_unreachable_endpoint_with_credentials_is_reported_without_them(command: str) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "memwal_core.cli.main", command, "s3://bucket/t"),
            *("-o", f"aws_endpoint=http://user:{SECRET}@127.0.0.1:9", "-o", "allow_http=true"),
            *("-o", "aws_access_key_id=AKIAEXAMPLE", "-o", f"aws_secret_access_key={SECRET}x"),
            *("-o", "aws_region=us-east-1"),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot reach" in done.stderr


def test_lance_build_paths_are_dropped_and_cuts_come_after_cleaning() -> None:
    from memwal_core.errors import first_line

    lance = "LanceError(IO): not a directory, /home/runner/work/lance/lance/rust/lance-io/src/object_store.rs:1576:42"
    assert redact(lance) == "LanceError(IO): not a directory"
    long = "x" * 290 + ", /home/runner/work/lance/lance/rust/lance/src/dataset.rs:12:3\nsecond line"
    assert first_line(long) == "x" * 290


def test_huge_durations_and_a_plain_file_are_bad_input(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("hello")
    for args in (["retain", str(tmp_path), "--older-than", "99999999999d"], ["demo", str(plain)]):
        done = subprocess.run(
            [sys.executable, "-m", "memwal_core.cli.main", *args],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert plain.read_text() == "hello"
