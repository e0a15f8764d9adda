"""Directory and file names of the MemWAL layout (Lance's, and memwal's own next to it).

One place for every name a reader or a cleaner must agree on. Region manifests and WAL entries are named by the 64-bit reversal of their
number, written as 64 binary digits, so that consecutive numbers spread over
the key space of an object store.
"""

from __future__ import annotations

import re

from memwal_core.errors import CorruptMetadataError

U64_MAX = (1 << 64) - 1
MEM_WAL_DIR = "_mem_wal"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"
# Lance's other system index (fragment reuse after a deferred index remap).
FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_DETAILS_TYPE_URL = "/lance.table.MemWalIndexDetails"
REGION_MANIFEST_DIR = "manifest"
REGION_WAL_DIR = "wal"
VERSION_HINT_FILE = "version_hint.json"
REGION_MANIFEST_SUFFIX = ".binpb"
WAL_SUFFIX = ".arrow"
TABLE_VERSIONS_DIR = "_versions"
INDICES_DIR = "_indices"
# A region snapshot too large for the index details, in `_indices/{index uuid}/`.
REGION_SNAPSHOT_FILE = "index.lance"
# A flushed generation's primary-key index sidecar (not in its dataset manifest): the smallest
# and largest key of each of its pages.
GENERATION_KEY_PAGES = "_pk_index/page_lookup.lance"
# memwal's own: rows Spark tasks hand over (removed by their reader, else by GC), and leases.
STAGING_DIR = "_memwal_staging"
LEASE_DIR = "_memwal_leases"
# The last outcome of each maintenance service (model/outcomes.py), read by `memwal metrics`.
OUTCOME_DIR = "_memwal_outcomes"
# memwal's copy of the last region snapshot's versions (model/region_versions.py).
REGION_VERSIONS_FILE = "_memwal_hints/region_versions.json"
# When GC next scans each region's WAL folder for abandoned uploads (services/gc/wal_temps.py).
WAL_TEMP_SCANS_FILE = "_memwal_hints/wal_temp_scans.json"
# The oldest manifest version each region kept after the last GC run (services/gc/versions.py).
OLDEST_MANIFESTS_FILE = "_memwal_hints/oldest_manifest_versions.json"
# The WAL position below which GC deleted each region's covered entries (services/gc/retention.py).
WAL_DELETED_FILE = "_memwal_hints/wal_deleted.json"
# The object memwal writes to read the store's clock (model/clock.py), overwritten by every reading.
CLOCK_FILE = "_memwal_hints/clock.json"
# The maintenance rules the table is kept under, one write-once record per rules number (model/rules.py).
RULES_DIR = "_memwal_rules"

# A flushed generation's directory: `{8 hex chars}_gen_{g}`.
_GENERATION_DIR = re.compile(r"^[0-9a-f]{8}_gen_(\d+)$")
# Lance's V2 table manifest names: 20 digits, counting down from U64_MAX.
_TABLE_MANIFEST = re.compile(r"^([0-9]{20})\.manifest$")


def bitrev64(n: int) -> str:
    """The 64-character binary string of `n` with its bits reversed."""
    if not 0 <= n <= U64_MAX:
        raise ValueError(f"{n} is not an unsigned 64-bit number")
    return format(n, "064b")[::-1]


def parse_bitrev64(name: str) -> int:
    """Inverse of `bitrev64`; raises CorruptMetadataError on a foreign name."""
    if len(name) != 64 or set(name) - {"0", "1"}:
        raise CorruptMetadataError(f"{name!r} is not a bit-reversed 64-bit file name")
    return int(name[::-1], 2)


def region_manifest_name(version: int) -> str:
    """File name of region manifest `version`."""
    return f"{bitrev64(version)}{REGION_MANIFEST_SUFFIX}"


def wal_entry_name(position: int) -> str:
    """File name of the WAL entry at 1-based `position`."""
    return f"{bitrev64(position)}{WAL_SUFFIX}"


def table_manifest_name(version: int) -> str:
    """File name of base-table manifest `version` (Lance's V2 naming)."""
    return f"{U64_MAX - version}.manifest"


def table_manifest_version(name: str) -> int | None:
    """Version of a base-table manifest file name (Lance's V2 naming), else None."""
    match = _TABLE_MANIFEST.match(name)
    return U64_MAX - int(match.group(1)) if match else None


def region_snapshot_path(index_uuid: str) -> str:
    """Where the region snapshot file of index `index_uuid` lives, relative to the table."""
    return f"{INDICES_DIR}/{index_uuid}/{REGION_SNAPSHOT_FILE}"


def generation_from_dir_name(name: str) -> int | None:
    """Generation number of a flushed-generation directory name, else None."""
    match = _GENERATION_DIR.match(name)
    return int(match.group(1)) if match else None
