"""The one result shape: generic JSON, the shared failure, and the deprecated names the docs promise."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from memwal_core.errors import CorruptMetadataError
from memwal_core.services.result import NOT_IN_JSON, Failure, JsonRecord, ServiceResult, to_jsonable
from tests.unit.services.results import service_result_types

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Part:
    name: str
    share: float


@dataclass(frozen=True)
class Batch(JsonRecord):
    seconds_a: float
    seconds_b: float

    def computed_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds_a + self.seconds_b}


@dataclass(frozen=True)
class Outcome(ServiceResult):
    DEPRECATED_NAMES: ClassVar = {"planned_at_version": "read_version", "table_version": "version_after"}

    parts: list[Part]
    batches: tuple[Batch, ...]
    tags: frozenset[str]
    by_region: dict[str, int]
    plan: object = field(default=None, metadata=NOT_IN_JSON)


def outcome(new_version: int | None = None) -> Outcome:
    return Outcome(
        table="s3://b/t",
        read_version=7,
        new_version=new_version,
        failures=[Failure("r1", "region r1: gone", 2)],
        seconds=1.234567,
        parts=[Part("a", 1 / 3)],
        batches=(Batch(0.00001, 0.5),),
        tags=frozenset({"z", "a"}),
        by_region={"r1": 3},
        plan=object(),
    )


def test_every_field_in_one_form_nested_rounded_and_computed() -> None:
    payload = outcome().to_json()
    assert payload == {
        "table": "s3://b/t",
        "read_version": 7,
        "new_version": None,
        "dry_run": False,
        "failures": [{"region": "r1", "error": "region r1: gone", "exit_code": 2}],
        "seconds": 1.2346,
        "throttled": {"responses": 0, "seconds": 0.0},
        "parts": [{"name": "a", "share": 0.3333}],
        "batches": [{"seconds_a": 0.0, "seconds_b": 0.5, "seconds": 0.5}],
        "tags": ["a", "z"],
        "by_region": {"r1": 3},
        # Old names, with the value of the names that replace them.
        "planned_at_version": 7,
        "table_version": 7,
    }
    assert "plan" not in payload, "a field marked NOT_IN_JSON stays out"
    assert outcome(new_version=9).to_json()["table_version"] == 9, "version_after: what it committed"


def test_strict_json_never_nan_and_no_silent_str() -> None:
    assert to_jsonable([math.nan, math.inf, -math.inf, 2.0]) == [None, None, None, 2.0]
    json.dumps(to_jsonable({"x": math.nan}), allow_nan=False)
    with pytest.raises(TypeError, match="bytes has no JSON form"):
        to_jsonable({"blob": b"\x00"})


def test_a_failure_names_its_region_once_and_keeps_the_exit_code() -> None:
    failure = Failure.of(CorruptMetadataError("generation 2 is gone"), "r9")
    assert (failure.exit_code, failure.message) == (2, "region r9: generation 2 is gone")
    assert Failure("r9", "region r9: lost", 1).message == "region r9: lost"
    assert Failure(None, "the table is gone").message == "the table is gone"


DOC_ROW = re.compile(
    r"^\| `?(?P<command>[a-z_]+)`?(?: check \(Dagster\))? \| `(?P<old>\w+)` \| `(?P<new>\w+)`"
)
# Where each deprecated name is printed: the command, or the Dagster check.
WHERE = {
    "MergeResult": "merge",
    "CatchupResult": "catchup",
    "GcResult": "gc",
    "SnapshotResult": "snapshot",
    "CompactionResult": "compact",
    "RetentionResult": "retain",
    "TableStatus": "status",
    "InitResult": "init",
    "ConsistencyResult": "lsm_consistency",
}
NEW_NAMES = {"version_after": "new_version"}


def test_the_deprecated_names_in_the_docs_are_the_ones_printed() -> None:
    printed = {
        (WHERE[cls.__name__], old, NEW_NAMES.get(new, new))
        for cls in service_result_types()
        for old, new in cls.DEPRECATED_NAMES.items()
    }
    interfaces = (ROOT / "docs" / "interfaces.md").read_text()
    documented = {
        (m["command"], m["old"], m["new"]) for line in interfaces.splitlines() if (m := DOC_ROW.match(line))
    }
    assert documented == printed
    # The README lists none itself: it points at the table, which must exist under that anchor.
    assert "(docs/interfaces.md#deprecated-names)" in (ROOT / "README.md").read_text()
    assert "\n### Deprecated names\n" in interfaces
