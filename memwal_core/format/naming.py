"""File names of the MemWAL layout (see docs: lance-memwal-format.md).

Region manifests and WAL entries are named by the 64-bit reversal of their
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
TABLE_VERSIONS_DIR = "_versions"

_GENERATION_DIR = re.compile(r"^[0-9a-f]{8}_gen_(\d+)$")


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
    return f"{bitrev64(version)}.binpb"


def wal_entry_name(position: int) -> str:
    """File name of the WAL entry at 1-based `position`."""
    return f"{bitrev64(position)}.arrow"


def table_manifest_name(version: int) -> str:
    """File name of base-table manifest `version` (Lance's V2 naming)."""
    return f"{U64_MAX - version}.manifest"


def generation_from_dir_name(name: str) -> int | None:
    """Generation number of a flushed-generation directory name, else None."""
    match = _GENERATION_DIR.match(name)
    return int(match.group(1)) if match else None
