"""The process-wide memory settings memwal applies when imported: its own defaults, never over the user's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memwal_core.process_memory import READAHEAD_ENV, bound_process_memory


def test_a_readahead_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(READAHEAD_ENV, "7")
    bound_process_memory()
    assert os.environ[READAHEAD_ENV] == "7"


def test_importing_memwal_core_bounds_lances_readahead() -> None:
    env = {k: v for k, v in os.environ.items() if k != READAHEAD_ENV}
    shown = subprocess.run(
        [sys.executable, "-c", f"import os, memwal_core; print(os.environ['{READAHEAD_ENV}'])"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert shown == "2"
