"""What `spark.read.format("memwal")` is given: the table URI, the source's own options, storage options.

Spark hands a data source every option as text, keys lower-cased. The
source's own options have names no storage option has; every other option
is a storage option, checked as the CLI checks `-o` (an unknown one is
refused, since Lance would silently ignore it). A refusal of a flag or a number
quotes the value only when it reads as a number (`errors.quoted`): Spark shows
the error in every driver's log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memwal_core.errors import BadInputError, quoted
from memwal_core.storage.options import StorageOptions

USE_LSM = "use_lsm"
VERSION = "version"
COLUMNS = "columns"
KEYS = "keys"
MIN_KEY = "min_key"
MAX_KEY = "max_key"
ROWS_PER_PARTITION = "rows_per_partition"
# A Spark partition reads about this many rows (base and pending together): a million rows of a
# few columns is a few seconds of one core, and Lance writes fragments of that size by default.
DEFAULT_ROWS_PER_PARTITION = 1 << 20
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass(frozen=True)
class SourceOptions:
    """One read's options. `version` None: the latest; `columns` None: every column of the table;
    `keys`, `min_key`, `max_key` (as given, read as the key's type when planning) None: every key."""

    uri: str
    storage: StorageOptions
    use_lsm: bool = True
    version: int | None = None
    columns: tuple[str, ...] | None = None
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    keys: str | None = None
    min_key: str | None = None
    max_key: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """The options Spark passed (`path` is the URI given to `load`); bad ones are named in one line."""
        values = {str(k).lower(): str(v) for k, v in options.items()}
        if "paths" in values:
            raise BadInputError("the memwal source reads one table: load(URI) with a single URI")
        uri = values.pop("path", "").strip()
        if not uri:
            raise BadInputError(
                "the memwal source needs the table URI: spark.read.format('memwal').load(URI)"
            )
        use_lsm = _flag(USE_LSM, values.pop(USE_LSM, "true"))
        version = _whole(VERSION, values.pop(VERSION)) if VERSION in values else None
        columns = _columns(values.pop(COLUMNS)) if COLUMNS in values else None
        rows = values.pop(ROWS_PER_PARTITION, None)
        keys, min_key, max_key = (values.pop(name, None) for name in (KEYS, MIN_KEY, MAX_KEY))
        return cls(
            uri,
            StorageOptions.checked(values),
            use_lsm,
            version,
            columns,
            _whole(ROWS_PER_PARTITION, rows) if rows is not None else DEFAULT_ROWS_PER_PARTITION,
            keys,
            min_key,
            max_key,
        )


def _flag(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise BadInputError(f"memwal source option {name}={quoted(raw)} is not true or false")


def _whole(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise BadInputError(f"memwal source option {name}={quoted(raw)} is not a whole number of at least 1")
    return value


def _columns(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(","))
    if not all(names):
        raise BadInputError(f"memwal source option {COLUMNS} is not a comma-separated list of columns")
    return names
