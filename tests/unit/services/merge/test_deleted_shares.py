"""Each region's share of a batch's deleted rows, counted beside the commit: a failed count never fails a
batch that is already committed, and one read of every region's labelled keys splits the count."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal_core.services.merge.batch_merge import deleted_shares
from memwal_core.services.merge.collapse import REGION_COLUMN, InMemoryCollapse
from memwal_core.services.merge.commit import base_rows_matching


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


def test_each_region_counts_the_base_rows_its_deleted_keys_match(tmp_path: Path) -> None:
    """The count splits by the region each deleted key is labelled with; a key not in the base counts for
    no one, and a region whose keys match nothing counts 0."""
    lance.write_dataset(
        pa.table({"id": pa.array(range(100), pa.int32()), "v": pa.array(range(100))}), tmp_path
    )
    collapse = InMemoryCollapse()
    for region, keys in {"a": [1, 2, 500], "b": [3], "c": [700], "d": [4]}.items():
        collapse.deleted_tables[region] = pa.table({"id": pa.array(keys, pa.int64())})
    labelled = collapse.deleted_keys({"a", "b", "c"}, labelled=True)
    assert sorted(
        zip(labelled.column("id").to_pylist(), labelled.column(REGION_COLUMN).to_pylist(), strict=True)
    ) == [
        (1, "a"),
        (2, "a"),
        (3, "b"),
        (500, "a"),
        (700, "c"),
    ]
    counted = base_rows_matching(lance.dataset(tmp_path), ["id"], labelled, ["a", "b", "c"])
    assert counted == {"a": 2, "b": 1, "c": 0}
