"""Each region's share of a batch's deleted rows, counted beside the commit: a failed count never fails a
batch that is already committed."""

from __future__ import annotations

import logging
from concurrent.futures import Future

import pytest

from memwal_core.services.merge.batch_merge import deleted_shares


def done(
    value: dict[str, int] | None = None, error: BaseException | None = None
) -> Future[dict[str, int] | None]:
    future: Future[dict[str, int] | None] = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_one_region_takes_the_whole_count() -> None:
    assert deleted_shares(done(None), ["a"], 7) == {"a": 7}


def test_the_count_splits_the_rows(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert deleted_shares(done({"a": 3, "b": 4}), ["a", "b"], 7) == {"a": 3, "b": 4}
    assert not caplog.records


def test_a_count_that_disagrees_with_the_commit_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert deleted_shares(done({"a": 3, "b": 4}), ["a", "b"], 9) == {"a": 3, "b": 4}
    assert "9 base rows deleted, 7 matched" in caplog.text


def test_a_failed_count_is_a_warning_and_each_region_reports_zero(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        shares = deleted_shares(done(error=OSError("LanceError(IO): connection reset\nmore")), ["a", "b"], 9)
    assert shares == {"a": 0, "b": 0}
    assert "could not be counted (LanceError(IO): connection reset)" in caplog.text


def test_a_bug_in_the_count_is_not_hidden() -> None:
    with pytest.raises(KeyError):
        deleted_shares(done(error=KeyError("id")), ["a", "b"], 9)
