"""The status asset's regions table and figures: pure rules, on backlogs built in memory."""

from __future__ import annotations

import uuid

from memwal_core.services.backlog import RegionBacklog, TableBacklog
from memwal_pipelines.status_view import REGION_ROWS, duration, regions_table, size

NOW = 10_000.0


def region(n: int, pending: int, pending_bytes: int = 0, age: float = 0.0) -> RegionBacklog:
    return RegionBacklog(
        region=str(uuid.UUID(int=n + 1, version=4)),
        merged_generation=3,
        latest_flushed=3 + pending,
        pending=tuple(range(4, 4 + pending)),
        pending_bytes=pending_bytes,
        oldest_pending_created_at=NOW - age if pending else None,
    )


def rows(markdown: str) -> list[list[str]]:
    """The table's body rows, as cells."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_behind_regions_first_most_pending_first_then_caught_up_ones() -> None:
    regions = [
        region(0, 0),
        region(1, 2, 2048, 30),
        region(2, 5, 10, 7200),
        region(3, 2, 4096, 5),
        region(4, 0),
    ]
    table = regions_table(TableBacklog("t", 9, regions, NOW))
    assert table.splitlines()[0] == (
        "**3 of 5 regions behind**: 9 pending generations, 6.0 KiB, the oldest flushed 2 h 00 min ago "
        "(table version 9)"
    )
    body = rows(table)
    assert [r[-1] for r in body] == [regions[i].region for i in (2, 3, 1, 0, 4)], "ties: more bytes first"
    assert body[0] == [
        "**" + regions[2].region[:8] + "**",
        "**behind**",
        "**5**",
        "10 B",
        "2 h 00 min",
        "3 / 8",
        regions[2].region,
    ]
    assert body[3][1:6] == ["caught up", "0", "-", "-", "3 / 3"]


def test_a_table_of_thousands_of_regions_is_cut_with_a_count_of_the_rest() -> None:
    regions = [region(n, n % 3) for n in range(3000)]
    table = regions_table(TableBacklog("t", 1, regions, NOW))
    assert len(rows(table)) == REGION_ROWS
    assert all(r[1] == "**behind**" for r in rows(table)), "behind regions fill the rows first"
    assert (
        table.splitlines()[-1]
        == f"… and {3000 - REGION_ROWS} more regions ({2000 - REGION_ROWS} of them behind)"
    )
    caught_up = regions_table(TableBacklog("t", 1, [region(0, 0)], NOW))
    assert caught_up.splitlines()[0] == "**All 1 region caught up** (table version 1)"


def test_sizes_and_ages_for_people() -> None:
    assert [size(n) for n in (0, 1023, 1024, 1536, 5 * 2**30, 3 * 2**40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 GiB",
        "3.0 TiB",
    ]
    assert [duration(s) for s in (0, 59.9, 60, 3599, 3600, 86_399, 90_000)] == [
        "0 s",
        "59 s",
        "1 min 00 s",
        "59 min 59 s",
        "1 h 00 min",
        "23 h 59 min",
        "1 d 01 h",
    ]
