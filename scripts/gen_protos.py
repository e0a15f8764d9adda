"""Regenerate the Python protobuf modules from protos/.

The generated code is committed so that installing the package needs no
protoc; tests/unit/format/test_protos_current.py fails when it is stale.
Usage: python scripts/gen_protos.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
DEFAULT_OUT = ROOT / "memwal_core" / "format" / "proto"


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto file; return the files it wrote."""
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = resources.files("grpc_tools") / "_proto"
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(protos)}")
    return sorted(p for p in out_dir.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi")))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    for path in generate(target):
        print(path)
