"""The maintenance rules a table is kept under, recorded in the table, so that an older memwal refuses it.

What GC may delete changes between releases, and writers come to rely on what it keeps:
this release's writers rely on the WAL entries and manifest versions GC keeps for the
fence retention, which the previous release's GC deleted. A GC that does not know the
rules a table is kept under must not delete by its own. So each set of rules has a
number (`MAINTENANCE_RULES`), and GC records the number it keeps the table under as a
write-once object, `_memwal_rules/{number}.json` (put-if-not-exists: two releases
racing only add records, never overwrite one). Before it deletes anything (a dry run
too), GC lists the records, one LIST, and refuses the table if one names rules newer
than it knows. Names that are no number are not records.

Rules 1: generations after merge, index catch-up, retained versions and the grace
period; WAL entries and manifest versions only once older than the fence retention
(docs/internals.md, "What stops a stalled writer").
"""

from __future__ import annotations

import contextlib
import json
import time

from memwal_core.errors import AlreadyExistsError, NewerRulesError
from memwal_core.format.naming import RULES_DIR
from memwal_core.storage.object_store import ObjectStore

MAINTENANCE_RULES = 1


def _path(rules: int) -> str:
    return f"{RULES_DIR}/{rules:08d}.json"


def recorded_rules(store: ObjectStore) -> int:
    """The newest rules recorded for the table (0: none, a table no GC of this release has kept yet)."""
    numbers = []
    for info in store.list_files(RULES_DIR):
        name = info.path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            numbers.append(int(name[:-5]))
    return max(numbers, default=0)


def check_rules(store: ObjectStore) -> int:
    """The rules recorded for the table; NewerRulesError if they are newer than this memwal knows."""
    rules = recorded_rules(store)
    if rules > MAINTENANCE_RULES:
        raise NewerRulesError(
            f"table {store.uri} is kept under maintenance rules {rules} ({store.describe(_path(rules))}); "
            f"this memwal knows rules up to {MAINTENANCE_RULES}: refused, upgrade memwal on this host"
        )
    return rules


def keep_rules(store: ObjectStore, recorded: int) -> None:
    """Record that the table is kept under this memwal's rules, unless `recorded` (`check_rules`) says so."""
    if recorded >= MAINTENANCE_RULES:
        return
    record = {"rules": MAINTENANCE_RULES, "written_at": time.time()}
    with contextlib.suppress(AlreadyExistsError):  # another run of this release recorded them meanwhile
        store.put_if_not_exists(_path(MAINTENANCE_RULES), json.dumps(record).encode())
