"""Where the project is, for tests that run its commands as subprocesses."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
