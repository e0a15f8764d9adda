"""Headless Chromium for the UI tests (Debian's, driven by Playwright) and the pictures the README shows.

Screenshots are always saved under artifacts/; the README's copies in docs/images/
are refreshed only on request (MEMWAL_UPDATE_README_IMAGES=1), so a test run leaves
the checkout as it was.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tests.support.paths import PROJECT_ROOT

ARTIFACTS = PROJECT_ROOT / "artifacts"
README_IMAGES = PROJECT_ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Dagster's first-visit dialog on localhost; `nux: enabled: false` in dagster.yaml turns it off.
COMMUNITY_DIALOG = "Join the Dagster community"
# It opens a second after a page loads: a check for it waits this long first.
COMMUNITY_DIALOG_DELAY_MS = 1500


def launch_browser(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)


def keep_for_readme(screenshot: str) -> None:
    """Copy the artifact `screenshot` over the README's picture of the same name, when asked to."""
    if os.environ.get("MEMWAL_UPDATE_README_IMAGES") == "1":
        shutil.copy(ARTIFACTS / screenshot, README_IMAGES / screenshot)
