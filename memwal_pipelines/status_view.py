"""What the `{table}/status` asset shows: which regions are behind, without opening any JSON.

Every materialization of the status carries, besides the status JSON (`result`),
a Markdown table of the regions (`regions_table`: behind regions first, most
pending generations first, at most REGION_ROWS rows, since a table may have
thousands of regions and metadata is stored with every event) and table-level
numbers the UI plots over time (`regions`, `regions_behind`,
`pending_generations`, `pending_bytes`, `max_oldest_pending_age_seconds`).
All of it comes from one read of the region manifests (`status_and_backlog`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagster import MetadataValue

from memwal_core.services.backlog import RegionBacklog, TableBacklog
from memwal_core.services.status import TableStatus

REGION_ROWS = 25
SHORT_ID = 8
BEHIND = "**behind**"
CAUGHT_UP = "caught up"


@dataclass(frozen=True)
class StatusView:
    """A table's status and every region's backlog, read together."""

    status: TableStatus
    backlog: TableBacklog

    def figures(self) -> dict[str, Any]:
        """Plottable table-level numbers and the regions table (metadata keys of the status asset)."""
        regions = self.backlog.regions
        return {
            "regions": len(self.status.regions),
            "regions_behind": sum(1 for r in regions if r.pending),
            "pending_generations": self.status.pending_total,
            "pending_bytes": sum(r.pending_bytes for r in regions),
            "max_oldest_pending_age_seconds": round(self.backlog.max_age_seconds, 1),
            "regions_table": MetadataValue.md(regions_table(self.backlog)),
        }


def regions_table(backlog: TableBacklog, limit: int = REGION_ROWS) -> str:
    """The regions as Markdown: behind ones first (most pending, then most bytes), then caught-up ones."""
    now = backlog.read_at
    behind = sorted(
        (r for r in backlog.regions if r.pending),
        key=lambda r: (-len(r.pending), -r.pending_bytes, -r.oldest_pending_age(now), r.region),
    )
    caught_up = sorted((r for r in backlog.regions if not r.pending), key=lambda r: r.region)
    ordered = [*behind, *caught_up]
    pending = sum(len(r.pending) for r in behind)
    if behind:
        summary = (
            f"**{len(behind)} of {len(ordered)} regions behind**: {_count(pending, 'pending generation')}, "
            f"{size(sum(r.pending_bytes for r in behind))}, the oldest flushed "
            f"{duration(backlog.max_age_seconds)} ago"
        )
    else:
        summary = f"**All {_count(len(ordered), 'region')} caught up**"
    lines = [
        f"{summary} (table version {backlog.table_version})",
        "",
        "| region | state | pending generations | pending bytes | oldest pending | merged / flushed "
        "| region id |",
        "|---|---|--:|--:|--:|--:|---|",
        *(_row(r, now) for r in ordered[:limit]),
    ]
    hidden = ordered[limit:]
    if hidden:
        hidden_behind = sum(1 for r in hidden if r.pending)
        lines += ["", f"… and {_count(len(hidden), 'more region')} ({hidden_behind} of them behind)"]
    return "\n".join(lines)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _row(region: RegionBacklog, now: float) -> str:
    """One region: its short id, state, backlog and merge progress, then its full id."""
    if region.pending:
        backlog = [BEHIND, f"**{len(region.pending)}**", size(region.pending_bytes)]
        backlog.append(duration(region.oldest_pending_age(now)))
    else:
        backlog = [CAUGHT_UP, "0", "-", "-"]
    progress = f"{region.merged_generation} / {region.latest_flushed}"
    cells = [f"**{region.region[:SHORT_ID]}**", *backlog, progress, region.region]
    return "| " + " | ".join(cells) + " |"


def size(count: int) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 3.2 GiB."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def duration(seconds: float) -> str:
    """An age for people: 42 s, 5 min 03 s, 2 h 07 min, 3 d 04 h."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"
