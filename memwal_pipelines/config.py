"""The tables the code location maintains, read from a YAML file named by MEMWAL_TABLES.

Without MEMWAL_TABLES the location maintains one table: the README's demo table
(or MEMWAL_TABLE_URI), with storage options from the JSON in
MEMWAL_STORAGE_OPTIONS. Credentials never go in this file: each table names the
environment variable that holds its storage options.

```yaml
tables:
  - name: events                 # asset key prefix: letters, digits, underscores
    uri: s3://bucket/tables/events
    storage_options_env: EVENTS_STORAGE_OPTIONS
    merge_engine: spark          # local (default) or spark
    spark_master: spark://10.0.0.5:7077
    max_batch_rows: 1000000      # per merge commit (default: from the machine's memory)
    max_batch_bytes: 2147483648
    max_backlog_generations: 16  # asset check thresholds
    max_pending_age_seconds: 900
    max_index_lag: 4
    snapshot_cron: "*/15 * * * *"
    sensor_interval_seconds: 5   # how often the flushed-generations sensor reads the backlog
    status_interval_seconds: 60  # the sensor records the status at most this often (when it changed)
    gc_cron: "45 * * * *"        # GC, after the blocking LSM-consistency check
    gc_grace_seconds: 3600       # a pruned generation's directory stays this long
    max_gc_backlog_generations: 256   # merged generations GC could delete but has not
    compaction_cron: "15 */6 * * *"
    compaction_fragment_threshold: 64 # the sensor asks for a compaction from this many fragments
    compaction_target_rows: 1048576
    compaction_max_tasks: 8      # bounds how long a merge commit may wait for a compaction
    retention_cron: "30 3 * * *"
    retain_older_than: 7d        # at least 1h
    retain_keep_versions: null
```
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from memwal_core.errors import BadInputError
from memwal_core.services.compact import DEFAULT_TARGET_ROWS
from memwal_core.services.gc.rules import DEFAULT_GRACE_SECONDS, GcPolicy
from memwal_core.services.merge.batch import MergeBudget
from memwal_core.services.retain import MIN_AGE, parse_duration

DEFAULT_TABLE_URI = "demo/table"
TABLES_ENV = "MEMWAL_TABLES"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Keys that stay text when YAML reads a number, so a bare `90` duration fails as bad input.
_TEXT = ("name", "uri", "retain_older_than")


@dataclass(frozen=True)
class TableConfig:
    """One maintained table and how its pipeline runs."""

    name: str
    uri: str
    storage_options_env: str | None = None
    merge_engine: str = "local"
    spark_master: str | None = None
    max_generations_per_merge: int | None = None
    # What one merge commit may collapse (None: a share of the machine's memory, see README).
    max_batch_rows: int | None = None
    max_batch_bytes: int | None = None
    max_backlog_generations: int = 16
    max_pending_age_seconds: float = 900.0
    max_index_lag: int = 4
    snapshot_cron: str = "*/15 * * * *"
    sensor_interval_seconds: int = 5
    status_interval_seconds: float = 60.0
    gc_cron: str = "45 * * * *"
    gc_grace_seconds: float = DEFAULT_GRACE_SECONDS
    max_gc_backlog_generations: int = 256
    compaction_cron: str = "15 */6 * * *"
    compaction_fragment_threshold: int = 64
    compaction_target_rows: int = DEFAULT_TARGET_ROWS
    compaction_max_tasks: int = 8
    retention_cron: str = "30 3 * * *"
    retain_older_than: str = "7d"
    retain_keep_versions: int | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise BadInputError(f"table name {self.name!r} must be letters, digits and underscores")
        if self.merge_engine not in ("local", "spark"):
            raise BadInputError(f"table {self.name}: merge_engine must be local or spark")
        # Fail when the list loads, not at the first scheduled run.
        self.gc_policy()
        self.merge_budget()
        if parse_duration(self.retain_older_than) < MIN_AGE:
            raise BadInputError(f"table {self.name}: retain_older_than must be at least {MIN_AGE}")
        interval = self.status_interval_seconds
        if not isinstance(interval, int | float) or not 0 <= interval < math.inf:
            raise BadInputError(f"table {self.name}: status_interval_seconds must be a number >= 0")
        if self.compaction_fragment_threshold < 2 or self.compaction_max_tasks < 1:
            raise BadInputError(
                f"table {self.name}: compaction needs a fragment threshold >= 2 and max tasks >= 1"
            )

    def gc_policy(self) -> GcPolicy:
        return GcPolicy(grace_seconds=self.gc_grace_seconds)

    def merge_budget(self) -> MergeBudget:
        return MergeBudget.default(max_rows=self.max_batch_rows, max_bytes=self.max_batch_bytes)


def default_tables() -> list[TableConfig]:
    return [
        TableConfig(
            name="demo",
            uri=os.environ.get("MEMWAL_TABLE_URI", DEFAULT_TABLE_URI),
            storage_options_env="MEMWAL_STORAGE_OPTIONS",
        )
    ]


def load_tables(path: str | None = None) -> list[TableConfig]:
    """The table list from `path` (default: $MEMWAL_TABLES), or the demo table."""
    path = path or os.environ.get(TABLES_ENV)
    if not path:
        return default_tables()
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BadInputError(f"table list {path} cannot be read: {exc}") from exc
    entries = document.get("tables") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadInputError(f"table list {path} has no `tables:` list")
    known = {f.name for f in fields(TableConfig)}
    tables = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry or "uri" not in entry:
            raise BadInputError(f"table list {path}: every table needs a name and a uri")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise BadInputError(f"table list {path}: table {entry['name']} has unknown key {unknown[0]!r}")
        tables.append(TableConfig(**_typed(entry)))
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise BadInputError(f"table list {path} names a table twice")
    return tables


def _typed(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: str(value) if key in _TEXT else value for key, value in entry.items()}
