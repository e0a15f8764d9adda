"""One outage is one line: failures with the same error are reported together, naming their regions."""

from __future__ import annotations

from memwal_core.cli.render import failure_lines
from memwal_core.services.result import REGIONS_NAMED, Failure, ServiceResult, grouped
from memwal_pipelines.assets import failed_step

DOWN = "asking Spark for its parallelism: Spark job failed: failed to connect to all addresses"


def test_regions_failing_alike_are_one_line_and_others_their_own() -> None:
    regions = [f"r{i}" for i in range(12)]
    failures = [Failure(r, DOWN) for r in regions] + [
        Failure("r99", "flushed generation 3 cannot be read", 2)
    ]
    result = ServiceResult(table="t", read_version=1, seconds=0.0, failures=failures)
    groups = grouped(failures)
    assert [len(g.regions) for g in groups] == [12, 1]
    named = ", ".join(regions[:REGIONS_NAMED])
    assert groups[0].message == f"regions {named} and {12 - REGIONS_NAMED} more: {DOWN}"
    assert groups[1].message == "region r99: flushed generation 3 cannot be read"
    assert failure_lines(result) == [f"  FAILED: {groups[0].message}", f"  FAILED: {groups[1].message}"]
    step = failed_step(result)
    assert (
        step is not None
        and step.description == f"13 region(s) failed: {groups[0].message}; {groups[1].message}"
    )
