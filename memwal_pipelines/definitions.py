"""The code location: `dg dev` (and `dagster dev -w workspace.yaml`) loads `defs` from here.

Its tables are the `MemWalTableComponent` instances of the project's defs
folder (`memwal_pipelines/defs/`: the demo table, and every table added with
`dg scaffold defs memwal_pipelines.MemWalTableComponent NAME`), or, when
MEMWAL_TABLES names a table list (config.py), the tables of that list instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, load_from_defs_folder

from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TABLES_ENV, load_tables

PACKAGE = Path(__file__).parent


def location_definitions() -> Definitions:
    """The defs folder's tables, or MEMWAL_TABLES's list when it is set."""
    if os.environ.get(TABLES_ENV):
        return build_definitions(load_tables())
    return load_from_defs_folder(path_within_project=PACKAGE)


defs = location_definitions()
