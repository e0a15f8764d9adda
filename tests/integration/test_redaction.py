"""No credential appears in any message: ours, or Lance's echoed back, wherever the user put it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from memwal_core import errors
from memwal_core.cli.main import main
from memwal_core.demo import write_demo_table
from memwal_core.errors import NotFoundError, redact
from memwal_core.services.writer import MemWalWriter
from tests.support.cli import every_command
from tests.support.paths import PROJECT_ROOT
from tests.support.secrets import SECRET as PASTED
from tests.support.secrets import shown

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


@pytest.fixture(autouse=True)
def _nothing_withheld_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no value withheld: options one test gave must not hide another test's leak."""
    monkeypatch.setattr(errors, "_WITHHELD", errors._Withheld())


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("secrets") / "t")
    write_demo_table(uri, base_rows=20, regions=1, rounds=1, rows_per_generation=5)
    return uri


def printed(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command printed; with --json, its stdout must still be the one failure object."""
    out, err = capsys.readouterr()
    if out.strip():
        assert json.loads(out)["failures"][0]["error"], out
    return out + err


# A credential on the command line out of its place: the arguments after the table.
MISPLACED = {
    "a space for the =": ["-o", f"aws_secret_access_key {PASTED}"],
    "a colon for the =": ["-o", f"aws_secret_access_key:{PASTED}"],
    "unquoted, a space for the =": ["-o", "aws_secret_access_key", PASTED],
    "the secret alone": ["-o", PASTED],
    "the secret as the key": ["-o", f"{PASTED}=x"],
    "a padded token, a space for the =": ["-o", f"aws_session_token {PASTED}=="],
    "under timeout": ["-o", f"timeout={PASTED}"],
    "under connect_timeout": ["-o", f"connect_timeout={PASTED}"],
    "under client_retry_timeout": ["-o", f"client_retry_timeout={PASTED}"],
    "under client_max_retries": ["-o", f"client_max_retries={PASTED}"],
    "under max_concurrent_requests": ["-o", f"max_concurrent_requests={PASTED}"],
}


@pytest.mark.parametrize("arguments", MISPLACED.values(), ids=MISPLACED.keys())
def test_a_storage_option_out_of_place_is_refused_without_the_secret(
    table: str, arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", table, "--json", *arguments]) == 2
    text = printed(capsys)
    assert not shown(text), text
    assert "KEY=VALUE" in text or "storage option" in text or "unrecognized arguments: ***" in text, text


@pytest.mark.parametrize("command", [*every_command("source.csv"), "metrics"])
def test_every_command_refuses_a_mistyped_option_without_the_secret(
    table: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    required = every_command("source.csv").get(command, [])
    assert main([command, table, *required, "-o", f"aws_secret_access_key {PASTED}"]) == 2
    text = printed(capsys)
    assert not shown(text) and "'aws_secret_access_key ***' is not KEY=VALUE" in text, text


@pytest.mark.parametrize(
    "arguments",
    [
        ["merge", "--max-generations", PASTED],
        ["gc", "--grace-seconds", PASTED],
        ["metrics", "--listen", PASTED],
    ],
    ids=lambda arguments: arguments[1],
)
def test_a_secret_given_for_a_number_or_address_is_not_quoted(
    table: str, arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    command, *rest = arguments
    assert main([command, table, *rest]) == 2
    text = printed(capsys)
    assert not shown(text) and f"argument {rest[0]}: " in text, text


def test_credentials_in_the_uri_the_endpoint_and_the_environment_are_never_printed(
    table: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Already clean before issue 48; kept beside the rest so every place a credential goes is checked."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE48")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PASTED)
    monkeypatch.setenv("AWS_SESSION_TOKEN", PASTED)
    # A secret in a URL is percent-encoded (a raw `/` ends the host part).
    unreachable = [
        "-o",
        f"aws_endpoint=http://user:{quote(PASTED, safe='')}@127.0.0.1:9",
        "-o",
        "allow_http=true",
    ]
    for arguments in (
        ["status", f"s3://AKIAEXAMPLE48:{PASTED}@bucket/t"],
        ["ingest", table, f"s3://AKIAEXAMPLE48:{PASTED}@bucket/src/*.json"],
        ["status", "s3://bucket/t", *unreachable],
    ):
        assert main([*arguments, "--json"]) in (1, 2)
        text = printed(capsys)
        assert not shown(text) and ("***" in text or "cannot reach" in text), text


def test_a_value_lance_quotes_back_is_withheld(seaweed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Lance and the object store quote a value they cannot use in words of their own (`"..." is not a
    valid checksum algorithm`): a secret given under the wrong key is withheld from those too."""
    uri = "s3://memwal-test/secrets-quoted"
    options = seaweed.storage_options()
    write_demo_table(uri, options, base_rows=20, regions=1, rounds=1, rows_per_generation=5)
    flags = [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]
    for key in ("aws_checksum_algorithm", "aws_server_side_encryption", "aws_unsigned_payload", "block_size"):
        assert main(["merge", uri, "--json", *flags, "-o", f"{key}={PASTED}"]) == 2
        text = printed(capsys)
        assert not shown(text) and "***" in text, text


def test_writer_options_never_echo_a_secret(table: str) -> None:
    refusals: list[Callable[[], object]] = [
        lambda: MemWalWriter(table, {"timeout": PASTED}),
        lambda: MemWalWriter(table, {"max_concurrent_requests": PASTED}),
        lambda: MemWalWriter(table, PASTED),  # type: ignore[arg-type]
        lambda: MemWalWriter(table, durable_write=PASTED),
        lambda: MemWalWriter(table, max_memtable_rows=PASTED),
        lambda: MemWalWriter(f"s3://AKIAEXAMPLE48:{PASTED}@bucket/t"),
    ]
    for refused in refusals:
        errors._WITHHELD = errors._Withheld()  # each refusal on its own
        with pytest.raises(Exception) as raised:
            refused()
        assert not shown(f"{raised.value} {raised.value!r}"), str(raised.value)
