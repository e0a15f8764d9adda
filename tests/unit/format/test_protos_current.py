"""The committed protobuf code must be what scripts/gen_protos.py generates now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.support.paths import PROJECT_ROOT


def test_generated_protobuf_code_is_current(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_protos", PROJECT_ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = {p.name: p.read_bytes() for p in module.generate(tmp_path)}
    committed_dir = PROJECT_ROOT / "memwal_core" / "format" / "proto"
    committed = {
        p.name: p.read_bytes() for p in committed_dir.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi"))
    }
    assert fresh.keys() == committed.keys()
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"run scripts/gen_protos.py: {stale} are stale"
