"""A merger suspended past its leases, in the middle of its commit, loses nothing with any commit form.

Merger A collapses generation 1 (which deletes key 7), verifies progress under
its leases, and is suspended right there (a stalled process, a GC pause).
Its leases expire; merger B takes over and merges generations 1 and 2, which
re-inserts key 7. A resumes and commits what it had. A delete that A re-ran
against the newest version would remove B's key 7: the single form is fenced
by its marker, the two-step form by deleting only the rows of the version it
checked, with Lance's retries off.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from memwal_core.format.index_details import IndexDetails
from memwal_core.model.table import MemWalTable
from memwal_core.services.defaults import SINGLE, TWO_STEP
from memwal_core.services.engine import LocalEngine
from memwal_core.services.merge.result import MergeResult
from memwal_core.services.merge.service import merge
from tests.support.model import KEYED_SCHEMA, ModelTable
from tests.support.tables import assert_progress_never_decreases, progress_history

LEASE_SECONDS = 1.0


class StallingTable(MemWalTable):
    """Once armed, stalls in the next versioned progress read (the commit's check) until resumed."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.armed = False
        self.stalled = threading.Event()
        self.resume = threading.Event()

    def index_details(self, version: int | None = None) -> IndexDetails:
        details = super().index_details(version)
        if self.armed and version is not None:
            self.armed = False
            self.stalled.set()
            assert self.resume.wait(60)
        return details


class ArmAfterCollapse(LocalEngine):
    """The local engine, arming the table's stall once a collapse is done (the merge's only engine job)."""

    def __init__(self, table: StallingTable) -> None:
        super().__init__()
        self.table = table

    def run(self, task: Any, items: Any, *, what: str, waiting: int | None = None) -> Any:
        collapsed = super().run(task, items, what=what, waiting=waiting)
        self.table.armed = True
        return collapsed


@pytest.mark.parametrize("form", [SINGLE, TWO_STEP])
def test_merger_stalled_past_its_leases_loses_nothing(tmp_path: Path, form: str) -> None:
    table = ModelTable(tmp_path / "t", KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(20)])
    region = table.write(None, [("delete", [{"id": 7}]), ("put", [{"id": 30, "v": "g1"}])], memtable_rows=2)
    table.write(region, [("put", [{"id": 7, "v": "again"}])], memtable_rows=2)
    stalled = StallingTable(table.uri)
    outcome: dict[str, MergeResult | BaseException] = {}

    def merger_a() -> None:
        try:
            outcome["a"] = merge(
                stalled,
                max_generations=1,
                engine=ArmAfterCollapse(stalled),
                lease_ttl=LEASE_SECONDS,
                commit_form=form,
            )
        except BaseException as exc:
            outcome["a"] = exc

    a = threading.Thread(target=merger_a)
    a.start()
    assert stalled.stalled.wait(60), "merger A never reached its commit"
    threading.Event().wait(LEASE_SECONDS * 1.5)  # A's leases expire while it is stalled
    with MemWalTable.open(table.uri) as opened:
        b = merge(opened, lease_ttl=LEASE_SECONDS, commit_form=form)
    assert not b.failures and [r.merged_generations for r in b.regions] == [[1, 2]]
    stalled.resume.set()
    a.join(120)
    result_a = outcome["a"]
    assert isinstance(result_a, MergeResult), f"an error escaped merger A: {result_a!r}"
    assert not result_a.regions, "A's generation 1 was merged by B: A must merge nothing"
    assert table.actual()[(7,)]["v"] == "again", "B's re-inserted key was deleted by the stalled merger"
    table.assert_merged()
    assert_progress_never_decreases(progress_history(table.uri))
