"""The public API: `from memwal_core import ...` gives every service, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import memwal_core


def test_every_public_name_resolves_to_its_defining_module() -> None:
    assert memwal_core.__all__ == sorted(memwal_core._EXPORTS)
    for name in memwal_core.__all__:
        value = getattr(memwal_core, name)
        assert value.__module__ == memwal_core._EXPORTS[name], name


def test_importing_the_package_loads_no_lance_pyarrow_or_dagster() -> None:
    """Spark executors and the CLI's --help import memwal_core; the services load on first use."""
    code = "import sys, memwal_core; print(sorted(m for m in ('lance', 'pyarrow', 'dagster') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
