"""Service results as text for people: what `memwal` prints without `--json`.

The services return data only (`ServiceResult`); how it reads on a terminal is
the command's business, one function per result type. Dagster's run logs use
the same lines. Each text form is found by its result's class name, so printing
one result loads no other service (rendering a status never imports the merge).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memwal_core.services.catchup import CatchupResult
    from memwal_core.services.compact import CompactionResult
    from memwal_core.services.gc.service import GcResult
    from memwal_core.services.index_list import ListUpdate
    from memwal_core.services.ingest.service import IngestResult
    from memwal_core.services.initialize import InitResult
    from memwal_core.services.merge.result import MergeResult
    from memwal_core.services.result import ServiceResult
    from memwal_core.services.retain import RetentionResult
    from memwal_core.services.snapshot.service import SnapshotResult
    from memwal_core.services.status import TableStatus

# Result class name -> its text form (filled by `_form`).
_FORMS: dict[str, Callable[[Any], str]] = {}


def plural(count: int, noun: str) -> str:
    """`1 fragment`, `2 fragments`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def generation_range(generations: list[int]) -> str:
    """`3` for one generation, `3..5` for several."""
    return str(generations[0]) if len(generations) == 1 else f"{generations[0]}..{generations[-1]}"


def dry_run_mark(result: ServiceResult) -> str:
    return " [dry run]" if result.dry_run else ""


def engine_text(engine: str, reason: str) -> str:
    """`local engine`, or with why a round went there: `local engine: 1,766 rows < spark_min_rows ...`."""
    return f"{engine} engine" if reason == "named" else f"{engine} engine: {reason}"


def failure_lines(result: ServiceResult) -> list[str]:
    """One line per distinct error: a Spark outage that failed every region is one line, not one per region."""
    from memwal_core.services.result import grouped

    return [f"  FAILED: {group.message}" for group in grouped(result.failures)]


def render(result: ServiceResult) -> str:
    """The text form of a service result."""
    form = _FORMS.get(type(result).__name__)
    if form is None:
        raise TypeError(f"no text form for {type(result).__name__}")
    throttled = result.throttled
    if not throttled.responses:
        return form(result)
    return (
        f"{form(result)}\n  throttled: storage asked to slow down {plural(throttled.responses, 'time')}; "
        f"requests waited {throttled.seconds:.1f} s on it"
    )


def _form(name: str) -> Callable[[Callable[[Any], str]], Callable[[Any], str]]:
    """Register a text form for the result class `name`."""

    def register(form: Callable[[Any], str]) -> Callable[[Any], str]:
        _FORMS[name] = form
        return form

    return register


@_form("TableStatus")
def _status(result: TableStatus) -> str:
    lines = [
        f"table {result.table}  version {result.read_version}  "
        f"primary key {', '.join(result.primary_key) or '(none)'}",
        f"{len(result.regions)} region(s), {result.pending_total} pending generation(s)",
    ]
    for r in result.regions:
        pending = ",".join(map(str, r.pending_generations)) or "-"
        lines.append(
            f"  {r.region}  manifest v{r.manifest_version}  epoch {r.writer_epoch}  "
            f"merged {r.merged_generation}  flushed {len(r.flushed_generations)}  pending {pending}"
            + ("  SEALED" if r.sealed else "")
        )
    for index, progress in sorted(result.index_catchup.items()):
        caught = ", ".join(f"{region[:8]}:{g}" for region, g in sorted(progress.items())) or "-"
        lines.append(f"  index {index}: caught up {caught}")
    return "\n".join(lines)


@_form("InitResult")
def _init(result: InitResult) -> str:
    return (
        f"MemWAL enabled on {result.table} (version {result.new_version}, primary key {result.primary_key}, "
        f"maintained indexes {result.maintained_indexes or 'none'})"
    )


@_form("MergeResult")
def _merge(result: MergeResult) -> str:
    engine = engine_text(result.engine, result.engine_reason)
    lines = [f"merge of {result.table} ({engine}){dry_run_mark(result)}"]
    if result.dry_run and result.plan is not None:
        for p in result.plan.regions:
            lines.append(f"  {p.region}  would merge {[g.generation for g in p.generations]}")
        for planned in result.planned_batches:
            lines.append(
                f"  batch {planned['batch']}: would commit {len(planned['regions'])} region(s), "
                f"{planned['generations']} generation(s), {planned['rows']} rows"
            )
    for r in result.regions:
        lines.append(
            f"  {r.region}  merged {generation_range(r.merged_generations)}  "
            f"upserted {r.rows_upserted}  tombstones {r.tombstones}  rows deleted {r.rows_deleted}  "
            f"table v{r.table_version}"
        )
    for b in result.batches:
        lines.append(
            f"  batch {b.batch}: {len(b.regions)} region(s), {b.rows_upserted} upserted, {b.tombstones} tombstones, "
            f"{b.rows_deleted} rows deleted in one commit ({b.seconds_commit:.2f} s) -> table v{b.table_version}"
        )
    lines += failure_lines(result)
    for region in result.busy_regions:
        lines.append(f"  {region}  skipped: another merger holds it")
    planned_any = result.dry_run and result.plan is not None and result.plan.regions
    if not result.regions and not result.failures and not planned_any:
        lines.append("  nothing to merge")
    return "\n".join(lines)


@_form("GcResult")
def _gc(result: GcResult) -> str:
    payload = result.to_json()
    verb = "would delete" if result.dry_run else "deleted"
    reasons = Counter(k["reason"] for k in payload["kept"])
    lines = [
        f"gc of {result.table}{dry_run_mark(result)} (grace {result.plan.policy.grace_seconds:g} s)",
        f"  {verb} {len(payload['deleted'])} generation directories, "
        f"{payload['wal_entries']['deleted']} WAL entries, {payload['manifest_versions_deleted']} manifest versions; "
        f"{'would prune' if result.dry_run else 'pruned'} {len(payload['pruned'])} generations from region manifests",
    ]
    if reasons:
        lines.append("  kept: " + ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())))
    lines += failure_lines(result)
    return "\n".join(lines)


def _list_update(update: ListUpdate) -> list[str]:
    lines = []
    if update.added or update.removed:
        change = " ".join([*(f"+{n}" for n in update.added), *(f"-{n}" for n in update.removed)])
        where = "(dry run)" if update.table_version is None else f"at table v{update.table_version}"
        lines.append(f"  maintained_indexes list {change} {where}")
    for name, gens in update.waiting.items():
        lines.append(
            f"  {name}  not listed yet: {len(gens)} flushed generation(s) lack it "
            f"(region {gens[0].region} generation {gens[0].generation}, ...); merge, then catch up again"
        )
    lines.extend(
        f"  region {u.region}: new indexes wait, its manifest cannot be read ({u.error})"
        for u in update.unreadable_regions
    )
    return lines


@_form("CatchupResult")
def _catchup(result: CatchupResult) -> str:
    lines = [f"catch-up of {result.table}: table v{result.read_version} -> v{result.version_after}"]
    if result.dry_run and result.plan is not None:
        lines[0] += " [dry run]"
        for p in result.plan.indexes:
            lines.append(f"  {p.index}  lag {sum(lag for _r, lag in p.lag)} generation(s)")
    if result.maintained_list is not None:
        lines += _list_update(result.maintained_list)
    for r in result.indexes:
        before, after = sum(r.lag_before.values()), sum(r.lag_after.values())
        lines.append(f"  {r.index}  {r.method}  lag {before} -> {after} generation(s)  ({r.seconds:.2f} s)")
    for name in result.plan.missing if result.plan else ():
        lines.append(f"  {name}  listed as maintained but not on the table")
    if result.plan is not None and not result.plan.indexes:
        lines.append("  no maintained index")
    return "\n".join(lines)


@_form("SnapshotResult")
def _snapshot(result: SnapshotResult) -> str:
    where = result.path or "inline in the index details"
    lines = [
        f"snapshot of {result.table}: {result.regions} region(s), {result.snapshot_bytes} bytes, {where}, "
        f"table v{result.new_version}  ({result.seconds:.2f} s)",
        f"  {result.stale_wal_hints} stale WAL hint(s), {len(result.refreshed_hints)} refreshed",
    ]
    for r in result.progress_repairs:
        lines.append(
            f"  REPAIRED region {r.region}: progress had gone from {r.expected} to {r.found}; "
            f"restored at table v{r.table_version}"
        )
    return "\n".join(lines)


@_form("CompactionResult")
def _compaction(result: CompactionResult) -> str:
    engine = engine_text(result.engine, result.engine_reason)
    head = f"compaction of {result.table} ({engine}){dry_run_mark(result)}"
    if not result.plan.tasks:
        return f"{head}\n  nothing to compact ({plural(result.fragments_before, 'fragment')})"
    verb = "would rewrite" if result.dry_run else "rewrote"
    lines = [
        head,
        f"  {verb} {result.rows_rewritten} rows in {len(result.plan.tasks)} task(s): "
        f"fragments {result.fragments_before} -> {result.fragments_after}, table v{result.version_after}",
    ]
    if result.plan.tasks_left_out:
        lines.append(f"  {result.plan.tasks_left_out} task(s) left for the next run")
    return "\n".join(lines)


@_form("RetentionResult")
def _retention(result: RetentionResult) -> str:
    lines = [
        f"retention of {result.table}: removed {len(result.removed)} version(s), "
        f"{result.bytes_removed} bytes; oldest retained version {result.oldest_retained_version}"
    ]
    if result.tagged_versions:
        lines.append(f"  tagged versions kept: {result.tagged_versions}")
    if result.snapshot_rebuilt:
        lines.append("  the region snapshot file went with its version; rebuilt it")
    return "\n".join(lines)


@_form("IngestResult")
def _ingest(result: IngestResult) -> str:
    lines = [
        f"ingested {result.rows_written:,} row(s) from {result.files} file(s) into "
        f"{len(result.regions)} region(s) of {result.table} ({result.engine}, {result.seconds:.1f} s)"
    ]
    lines += [f"  {r.region}  {r.rows:,} row(s)" for r in result.regions]
    return "\n".join(lines)
