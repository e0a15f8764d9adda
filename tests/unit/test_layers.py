"""Imports flow one way, as docs/internals.md draws the layers: a module never imports a higher layer.

Every import counts, also one inside a function or under TYPE_CHECKING: each is
an arrow a reader follows.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import PROJECT_ROOT

# Lowest first; a module's layer is the longest prefix listed. Same-layer imports are allowed.
LAYERS: dict[str, int] = {
    "memwal_core.errors": 0,
    "memwal_core.lance_log": 0,
    "memwal_core.arguments": 0,
    "memwal_core.process_memory": 0,
    "memwal_core.format": 1,
    "memwal_core.storage": 1,
    "memwal_core.lance_errors": 1,
    "memwal_core.spark_session": 1,
    "memwal_core.model": 2,
    "memwal_core.services": 3,
    "memwal_core.demo": 3,
    "memwal_core": 4,  # the package's public API (__init__) and the cli below it
    "memwal_core.cli": 4,
    "memwal_pipelines": 5,
}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """Absolute names of the project's modules that `module` imports (`from pkg import mod` names mod)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = module.split(".")
            base = parts[: len(parts) - node.level + (1 if is_package else 0)] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return {name for name in found if layer_of(name) is not None}


def sources() -> list[Path]:
    return [
        path
        for package in ("memwal_core", "memwal_pipelines")
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if "proto" not in path.relative_to(PROJECT_ROOT).parts
    ]


def test_no_import_runs_back_up_the_layers() -> None:
    upward = []
    modules = {module_name(path) for path in sources()}
    for path in sources():
        module = module_name(path)
        own = layer_of(module)
        assert own is not None, f"{module} has no layer in LAYERS"
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in sorted(imported(tree, module, path.name == "__init__.py", modules)):
            target = layer_of(name)
            if target is not None and target > own:
                upward.append(f"{module} (layer {own}) imports {name} (layer {target})")
    assert not upward, "\n".join(upward)


def test_the_rule_sees_an_upward_import() -> None:
    tree = ast.parse("from memwal_core.model.table import MemWalTable\nfrom ..services import status")
    names = imported(tree, "memwal_core.storage.local", False, {"memwal_core.services.status"})
    assert names == {"memwal_core.model.table", "memwal_core.services.status"}
    assert [layer_of(n) for n in sorted(names)] == [2, 3] and layer_of("memwal_core.storage.local") == 1
