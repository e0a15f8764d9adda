"""The table's unenforced primary key, as Lance marks it in field metadata.

Read from the Arrow schema of an opened dataset, or from the fields of a table
manifest read directly (status names the key without loading Lance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PK_META = b"lance-schema:unenforced-primary-key"
PK_POSITION_META = b"lance-schema:unenforced-primary-key:position"


def primary_key_from(fields: Iterable[tuple[str, Mapping[bytes, bytes]]]) -> list[str]:
    """The key columns among top-level `(name, metadata)` fields, in key order."""
    keyed: list[tuple[int, int, str]] = []
    for index, (name, meta) in enumerate(fields):
        if meta.get(PK_META, b"").lower() == b"true":
            position = int(meta.get(PK_POSITION_META, b"0") or 0)
            keyed.append((position, index, name))
    return [name for _pos, _idx, name in sorted(keyed)]
