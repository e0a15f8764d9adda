"""The one shape of every service's result, and its one JSON form.

Every service returns a frozen `ServiceResult`: the table (its URI), the
version the service planned at (`read_version`), the version its own commit
made (`new_version`, None when it committed nothing), whether it was a dry
run, what failed while the rest went on (`failures`), how long it took
(`seconds`) and what a throttling store cost it (`throttled`). Scripts, the
CLI and the Dagster metadata read these names the same way for every service.

`to_json` is generic: every dataclass field (nested results, lists, mappings)
in the same form, floats rounded to 0.1 ms and never NaN (strict JSON). A
result adds only what it computes (`computed_json`). Names a result used
before the common ones are kept for one release (`DEPRECATED_NAMES`, listed
in docs/interfaces.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, Self

from memwal_core.errors import MemwalError
from memwal_core.storage.retry import NOT_THROTTLED, Throttled

FLOAT_DIGITS = 4
# Field metadata of what a result carries for its callers but does not print (a plan, live outcomes).
NOT_IN_JSON: Mapping[str, bool] = {"json": False}


def to_jsonable(value: Any) -> Any:
    """`value` as strict JSON values: dataclasses by field, sets sorted, non-finite floats as null."""
    # Leaves first: they are most of the values, and a dataclass check costs more than these.
    if value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return round(value, FLOAT_DIGITS) if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, JsonRecord):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return [to_jsonable(v) for v in sorted(value)]
    raise TypeError(f"{type(value).__name__} has no JSON form")


@dataclass(frozen=True)
class JsonRecord:
    """A frozen record whose JSON is its fields, what it computes, then its deprecated names."""

    # Old JSON name -> the attribute now carrying it; printed for one more release.
    DEPRECATED_NAMES: ClassVar[Mapping[str, str]] = {}

    def computed_json(self) -> dict[str, Any]:
        """Figures derived from the fields (totals, counts), added to the JSON."""
        return {}

    def to_json(self) -> dict[str, Any]:
        payload = {
            f.name: to_jsonable(getattr(self, f.name)) for f in fields(self) if f.metadata.get("json", True)
        }
        payload.update(to_jsonable(self.computed_json()))
        for old, new in self.DEPRECATED_NAMES.items():
            payload[old] = to_jsonable(getattr(self, new))
        return payload


@dataclass(frozen=True)
class Failure:
    """What failed while the rest went on: one region (or, without one, the run), in one line."""

    region: str | None
    error: str
    exit_code: int = 1

    @classmethod
    def of(cls, error: MemwalError, region: str | None = None) -> Failure:
        return cls(region, str(error), error.exit_code)

    @property
    def message(self) -> str:
        """The error as one line that names the region (most errors already do, in their object's path)."""
        if self.region is None or self.region in self.error:
            return self.error
        return f"region {self.region}: {self.error}"


@dataclass(frozen=True, kw_only=True)
class ServiceResult(JsonRecord):
    """What every service reports, whatever else it adds."""

    table: str
    read_version: int
    new_version: int | None = None
    dry_run: bool = False
    failures: list[Failure] = field(default_factory=list)
    seconds: float
    # The store's "slow down" answers to memwal's own requests, and the seconds they waited on them
    # (Lance's requests retry inside Lance, unseen).
    throttled: Throttled = NOT_THROTTLED

    def with_throttled(self, throttled: Throttled) -> Self:
        """This result, saying what throttling cost the run (known to whoever counted its requests)."""
        return replace(self, throttled=throttled)

    @property
    def version_after(self) -> int:
        """The table version the service left: what it committed, else what it read."""
        return self.read_version if self.new_version is None else self.new_version


# Regions a grouped failure names; a table of thousands fails them all alike when its engine is down.
REGIONS_NAMED = 5


@dataclass(frozen=True)
class FailureGroup:
    """Failures with the same error: one outage (a Spark server down) fails many regions alike."""

    regions: list[str]
    error: str
    exit_code: int

    @property
    def message(self) -> str:
        """One line for the whole group, naming its regions."""
        if len(self.regions) <= 1:
            return Failure(self.regions[0] if self.regions else None, self.error).message
        named = ", ".join(self.regions[:REGIONS_NAMED])
        if len(self.regions) > REGIONS_NAMED:
            named += f" and {len(self.regions) - REGIONS_NAMED} more"
        return f"regions {named}: {self.error}"


def grouped(failures: list[Failure]) -> list[FailureGroup]:
    """The failures by error, in order of first appearance: what one line each reports."""
    groups: dict[str, FailureGroup] = {}
    for failure in failures:
        group = groups.setdefault(failure.error, FailureGroup([], failure.error, failure.exit_code))
        if failure.region is not None:
            group.regions.append(failure.region)
    return list(groups.values())
