"""The LANCE_LOG filter drops exactly Lance's spurious MemWAL index line."""

from __future__ import annotations

import re

from memwal_core.lance_log import SPURIOUS, lance_log_spec


def test_the_filter_drops_exactly_the_spurious_message() -> None:
    spec = lance_log_spec("warn")
    assert spec.startswith("warn,lance=warn,lance::dataset::mem_wal::write=off/")
    assert "," not in spec.split("/", 1)[1]
    pattern = re.compile(spec.split("/", 1)[1])
    assert not pattern.search(SPURIOUS)
    for kept in ["", "I", "Index", SPURIOUS[:-1], "Index other has no fields", "Dataset not found: x"]:
        assert pattern.search(kept), kept
