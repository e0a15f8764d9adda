"""A maintained table's keys (`TableConfig`), and the MEMWAL_TABLES list of tables.

The same keys are the attributes of a `MemWalTableComponent` (component.py,
one table per `defs.yaml`, the code location's default) and of each entry of
the YAML file MEMWAL_TABLES names, which, when set, replaces the defs folder's
tables. Credentials never go in either: each table names the environment
variable that holds its storage options.

Every key is typed and checked when the list loads (a strict pydantic model:
`"5"` is no count and `2.5` no integer; only `name`, `uri` and
`retain_older_than` read a number as text; unknown keys are refused), with the
same range checks as the `memwal` command's options of the same meaning (a NaN,
a zero count or interval, a negative threshold are refused), the services' own
checks for durations, and the table URI read as the command reads it (`file:`
URIs become paths; a scheme other than `s3://`, `az://`, `abfss://` and `gs://`,
or credentials in the URI, are refused without echoing them), so a bad list
fails the code location's load, not the first scheduled run. A refusal is one
line naming the file, the table and the key, and never quotes a value
(`hide_input_in_errors`: pydantic would append it, and Dagster prints pydantic's
text whole). Storage options themselves (`storage_options:`) are refused: they
would show in every Dagster view. So is one table given twice, by its name or by
its location (`/x` and `file:///x/` are one), naming both entries (`refuse_twice`;
the components of a defs folder are checked the same way).

```yaml
tables:
  - name: events                 # asset key prefix: letters, digits, underscores
    uri: s3://bucket/tables/events
    storage_options_env: EVENTS_STORAGE_OPTIONS
    merge_engine: spark          # spark (default) or local
    spark_remote_env: EVENTS_SPARK_REMOTE  # the variable holding the Connect URL, token and all; or
    # spark_remote sc://10.0.0.5:15002 (no token), or spark_master spark://10.0.0.5:7077 (default: the pipeline's)
    spark_min_rows: 500000       # a merge round or compaction under both runs in the run's process
    spark_min_bytes: 268435456   # (0 rows: every round on Spark)
    max_batch_rows: 1000000      # per merge commit (default: from the machine's memory)
    max_batch_bytes: 2147483648
    merge_max_runtime_seconds: 1800  # a merge run lasting longer is failed as dead (default: from the budget)
    max_runtime_seconds: 3600    # so is a run of any other job (catch-up, snapshot, checks, upkeep)
    max_backlog_generations: 16  # asset check thresholds
    max_pending_age_seconds: 900
    max_index_lag: 4
    snapshot_cron: "*/15 * * * *"
    sensor_interval_seconds: 5   # how often the flushed-generations sensor reads the backlog
    sensors: true                # false: the sensors start no merge, catch-up or compaction runs for it
    status_interval_seconds: 60  # the sensor records the status at most this often (when it changed)
    gc_cron: "45 * * * *"        # GC, after the blocking LSM-consistency check
    checks_cron: "50 * * * *"    # the asset checks (each reads every region: hourly keeps an idle table cheap)
    gc_grace_seconds: 3600       # a pruned generation's directory stays this long
    gc_fence_retention_seconds: 604800   # WAL entries and manifest versions stay this long (at least a day)
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

import difflib
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from dagster import ResolutionContext, Resolver
from pydantic import AfterValidator, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass

from memwal_core.arguments import Range
from memwal_core.errors import BadInputError
from memwal_core.services.defaults import (
    DEFAULT_FENCE_RETENTION_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_MAX_PENDING_AGE_SECONDS,
    DEFAULT_SPARK_MIN_BYTES,
    DEFAULT_SPARK_MIN_ROWS,
    DEFAULT_TARGET_ROWS,
    MAX_GRACE_SECONDS,
    MIN_FENCE_RETENTION_SECONDS,
)
from memwal_core.services.gc.rules import GcPolicy
from memwal_core.services.merge.batch import MergeBudget
from memwal_core.services.retain import MIN_AGE, parse_duration
from memwal_core.spark_session import check_spark_target, remote_holds_credentials
from memwal_core.storage.stores import normalize_uri, refuse_credentials, table_location

DEFAULT_TABLE_URI = "demo/table"
# What a merge run's bound (`merge_max_runtime`) is made of: its start, then this many batches of the
# budget collapsed at no less than this speed (a loaded 2-core machine collapses about 40 MiB/s).
MERGE_RUN_START_SECONDS = 120.0
# The lag threshold is the base table's FreshnessPolicy window too, which Dagster refuses under a minute.
MIN_PENDING_AGE_SECONDS = 60.0
MERGE_BATCHES_PER_RUN = 3
MERGE_BYTES_PER_SECOND_FLOOR = 4 << 20
# An hour: far beyond what a catch-up, snapshot, checks, compaction (bounded by its tasks), retention or
# GC run takes, and a dead one's slot (a table's service, every table's upkeep) freed within it.
DEFAULT_MAX_RUNTIME_SECONDS = 3600
TABLES_ENV = "MEMWAL_TABLES"
# Where the demo table's component (memwal_pipelines/defs/demo/defs.yaml) finds the table.
URI_ENV = "MEMWAL_TABLE_URI"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
T = TypeVar("T")
# How pydantic prefixes the message of a ValueError a check raised.
VALUE_ERROR = "Value error, "


def _invalid(message: str) -> ValueError:
    """A check's refusal; pydantic reports it as a value error, whose prefix `_first_error` drops.

    A plain ValueError, not a custom pydantic error type: Dagster's component loader re-raises
    pydantic's errors by their type, and knows only pydantic's own types.
    """
    return ValueError(message)


def _ranged(allowed: Range, *, whole_number: bool = True) -> AfterValidator:
    """The range check the CLI's options and the library's arguments use, as a key's check."""

    def check(value: T, info: ValidationInfo) -> T:
        _service_check(lambda: allowed.check(str(info.field_name), value, whole_number))
        return value

    return AfterValidator(check)


# Each as the CLI option of the same meaning takes it (`--max-generations`, `--grace-seconds`, ...).
Count = Annotated[int, _ranged(Range(1))]
Threshold = Annotated[int, _ranged(Range(0))]
Seconds = Annotated[float, _ranged(Range(0, math.inf), whole_number=False)]


def _as_given(_context: ResolutionContext, value: Any) -> Any:
    """A component attribute as the YAML gives it (its template already rendered), for the table to check."""
    return value


# The name of an environment variable. The component's YAML may give it any value: Dagster's own refusal
# of a mapping would quote it (storage options put here by mistake are one); the table's check does not.
EnvName = Annotated[str | None, Resolver(_as_given, model_field_type=object)]


# Strict: a YAML value of the wrong type is refused, never converted (`"5"` is no interval). No refusal
# quotes the value it refused.
@dataclass(frozen=True, config=ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True))
class TableConfig:
    """One maintained table and how its pipeline runs; every value is checked when the list loads."""

    name: str
    uri: str
    storage_options_env: EnvName = None
    merge_engine: Literal["local", "spark"] = "spark"
    # The run's SparkSession: the pipeline's PySparkResource unless the table names its own Spark.
    spark_master: str | None = None
    spark_remote: str | None = None
    # The environment variable holding the Spark Connect URL, when it carries a token (`;token=...`):
    # the URL itself would show in every Dagster view.
    spark_remote_env: EnvName = None
    # A merge round or compaction smaller than both runs in the run's own process even with
    # merge_engine spark: Spark's fixed costs would outweigh it (docs/spark.md, "Spark where it pays").
    spark_min_rows: Threshold = DEFAULT_SPARK_MIN_ROWS
    spark_min_bytes: Threshold = DEFAULT_SPARK_MIN_BYTES
    max_generations_per_merge: Count | None = None
    # What one merge commit may collapse (None: a share of the machine's memory, see docs/merge.md).
    max_batch_rows: Count | None = None
    max_batch_bytes: Count | None = None
    # Seconds after which Dagster fails a merge run as dead (`dagster/max_runtime`); default from the budget.
    merge_max_runtime_seconds: Annotated[int, _ranged(Range(60))] | None = None
    # The same for the runs of every other job: one whose worker died with its code server (an OOM
    # kill, a lost host) stays STARTED, and holds its concurrency slot, until this bound fails it.
    max_runtime_seconds: Annotated[int, _ranged(Range(60))] = DEFAULT_MAX_RUNTIME_SECONDS
    max_backlog_generations: Threshold = 16
    max_pending_age_seconds: Annotated[
        float, _ranged(Range(MIN_PENDING_AGE_SECONDS, math.inf), whole_number=False)
    ] = DEFAULT_MAX_PENDING_AGE_SECONDS
    max_index_lag: Threshold = 4
    snapshot_cron: str = "*/15 * * * *"
    sensor_interval_seconds: Count = 5
    # false: the location's sensors leave the table alone (schedules and runs from the UI still work;
    # nothing stamps its base table's freshness then, so the UI judges it by its merges alone).
    sensors: bool = True
    status_interval_seconds: Seconds = 60.0
    gc_cron: str = "45 * * * *"
    checks_cron: str = "50 * * * *"
    gc_grace_seconds: Annotated[float, _ranged(Range(0, MAX_GRACE_SECONDS), whole_number=False)] = (
        DEFAULT_GRACE_SECONDS
    )
    gc_fence_retention_seconds: Annotated[
        float, _ranged(Range(MIN_FENCE_RETENTION_SECONDS, MAX_GRACE_SECONDS), whole_number=False)
    ] = DEFAULT_FENCE_RETENTION_SECONDS
    max_gc_backlog_generations: Threshold = 256
    compaction_cron: str = "15 */6 * * *"
    compaction_fragment_threshold: Annotated[int, _ranged(Range(2))] = 64
    compaction_target_rows: Count = DEFAULT_TARGET_ROWS
    compaction_max_tasks: Count = 8
    retention_cron: str = "30 3 * * *"
    retain_older_than: str = "7d"
    retain_keep_versions: Count | None = None
    # Never set: a key only so that options written here are refused by the table's own check, which
    # quotes none of them (Dagster's refusal of an unknown key prints the YAML around it).
    storage_options: Any = None

    @field_validator("name", "uri", "retain_older_than", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        """These stay text when YAML reads a number, so a bare `90` duration fails as a duration."""
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise _invalid(f"{name!r} must be letters, digits and underscores, starting with a letter")
        return name

    @field_validator("uri")
    @classmethod
    def _uri(cls, uri: str) -> str:
        """A scheme memwal reads, no credentials in it (they would show in every Dagster view)."""
        return _service_check(lambda: normalize_uri(uri))

    @field_validator("spark_master", "spark_remote")
    @classmethod
    def _spark_url(cls, url: str | None) -> str | None:
        if url is not None:
            _service_check(lambda: refuse_credentials(url, "configure Spark's authentication instead"))
            if url.startswith("sc://") and remote_holds_credentials(url):
                raise _invalid(
                    "holds a token, which every Dagster view would show: put the URL in an environment "
                    "variable and name that variable in spark_remote_env"
                )
        return url

    @field_validator("storage_options_env", "spark_remote_env", mode="before")
    @classmethod
    def _env_name(cls, name: Any) -> Any:
        """The variable's name, never its value: a value put here (`{{ env('X') }}` of the options or the
        URL) would show in every Dagster view, so it is refused without being quoted."""
        if name is not None and not (isinstance(name, str) and _ENV_NAME.match(name)):
            raise _invalid("is not an environment variable name: name the variable that holds the value")
        return name

    @field_validator("spark_remote_env")
    @classmethod
    def _spark_remote_env(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is not None and (info.data.get("spark_master") or info.data.get("spark_remote")):
            raise _invalid("name it or spark_master / spark_remote, not both")
        return name

    @field_validator("storage_options", mode="before")
    @classmethod
    def _no_storage_options(cls, options: Any) -> None:
        if options is not None:
            raise _invalid(
                "storage options (credentials among them) would show in every Dagster view: put them, as a "
                "JSON object, in an environment variable and name it in storage_options_env"
            )

    @field_validator("spark_remote")
    @classmethod
    def _spark_remote(cls, remote: str | None, info: ValidationInfo) -> str | None:
        """Master or remote, not both; a remote is sc:// (the engine's own check, run at load)."""
        _service_check(lambda: check_spark_target(info.data.get("spark_master"), remote))
        return remote

    @field_validator("retain_older_than")
    @classmethod
    def _retention(cls, text: str) -> str:
        if _service_check(lambda: parse_duration(text)) < MIN_AGE:
            raise _invalid(f"must be at least {MIN_AGE}, not {text}")
        return text

    def gc_policy(self) -> GcPolicy:
        return GcPolicy(
            grace_seconds=self.gc_grace_seconds, fence_retention_seconds=self.gc_fence_retention_seconds
        )

    def merge_budget(self) -> MergeBudget:
        return MergeBudget.default(max_rows=self.max_batch_rows, max_bytes=self.max_batch_bytes)

    def merge_max_runtime(self) -> int:
        """How long a merge run may last before Dagster's run monitoring fails it as dead.

        A run whose worker died with the daemon's process tree stays STARTED and keeps
        the table's pool slot; this bound is what frees it. Sized from the batch budget:
        the run's start (code, Spark session), then rounds of batches that each collapse
        at most `max_batch_bytes` at no less than MERGE_BYTES_PER_SECOND_FLOOR.
        """
        if self.merge_max_runtime_seconds is not None:
            return self.merge_max_runtime_seconds
        batch = self.merge_budget().max_bytes / MERGE_BYTES_PER_SECOND_FLOOR
        return int(MERGE_RUN_START_SECONDS + MERGE_BATCHES_PER_RUN * batch)

    def merge_round_seconds(self) -> float:
        """When a merge run stops starting batches: early enough that its last batch ends inside the bound."""
        working = self.merge_max_runtime() - MERGE_RUN_START_SECONDS
        return max(1.0, working - working / MERGE_BATCHES_PER_RUN)


def _service_check(check: Callable[[], T]) -> T:
    """Run a service's own check of a value; its refusal becomes this key's error."""
    try:
        return check()
    except BadInputError as exc:
        raise _invalid(str(exc)) from None


KEYS = tuple(f.name for f in fields(TableConfig))


def load_tables(path: str | None = None) -> list[TableConfig]:
    """The table list from `path` (default: $MEMWAL_TABLES).

    Every refusal is a BadInputError of one line naming the file, the table and the key.
    """
    path = path or os.environ.get(TABLES_ENV)
    if not path:
        raise BadInputError(f"no table list: {TABLES_ENV} is not set")
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise BadInputError(f"table list {path} cannot be read: {first}") from exc
    entries = document.get("tables") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadInputError(f"table list {path} has no `tables:` list")
    unknown = sorted(str(key) for key in document if key != "tables")
    if unknown:
        raise BadInputError(f"table list {path}: unknown key {unknown[0]!r} (the file holds `tables:` only)")
    tables = [_table(path, position, entry) for position, entry in enumerate(entries, start=1)]
    refuse_twice([(f"table {table.name}", table) for table in tables], prefix=f"table list {path}: ")
    return tables


def refuse_twice(tables: Sequence[tuple[str, TableConfig]], prefix: str = "") -> None:
    """Refuse a name, or a table, that two entries give (each entry named by where it is declared).

    A table is its location (`table_location`: `/x` and `file:///x/` are one):
    two entries for one table would give it two merge jobs, two pools and two
    GC schedules, each unaware of the other's runs.
    """
    names: dict[str, str] = {}
    locations: dict[str, str] = {}
    for where, table in tables:
        if table.name in names:
            also = f" (also {names[table.name]})" if names[table.name] != where else ""
            raise BadInputError(f"{prefix}{where}: name: names a table twice{also}")
        location = table_location(table.uri)
        if location in locations:
            raise BadInputError(
                f"{prefix}{where}: uri: names the same table as {locations[location]} ({location}): "
                "maintain each table from one entry"
            )
        names[table.name] = where
        locations[location] = where


def _table(path: str, position: int, entry: Any) -> TableConfig:
    """One entry of the list, checked; named by its name when it has a usable one, else by position."""
    name = entry.get("name") if isinstance(entry, dict) else None
    where = f"table list {path}: table {name if isinstance(name, str) and name else f'#{position}'}"
    if not isinstance(entry, dict) or not all(isinstance(key, str) for key in entry):
        raise BadInputError(f"{where}: not a mapping of keys to values")
    try:
        return TableConfig(**entry)
    except ValidationError as exc:
        raise BadInputError(f"{where}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    """The first refusal as `key: what is wrong` (pydantic lists them all, one per line)."""
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"]) or "?"
    if error["type"] == "unexpected_keyword_argument":
        close = difflib.get_close_matches(key, KEYS, n=1)
        return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if error["type"] == "missing":
        return f"{key}: missing (every table needs a name and a uri)"
    # A range check names its key itself, as the library's argument checks do.
    message = error["msg"].removeprefix(VALUE_ERROR)
    return message if message.startswith(f"{key} ") else f"{key}: {message}"
