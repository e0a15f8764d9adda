"""memwal_pipelines: the Dagster code location that runs memwal's services, and its Component.

`MemWalTableComponent` is exported here: the `dagster_dg_cli.registry_modules` entry point names
this package, so `dg list components` shows it as `memwal_pipelines.MemWalTableComponent`.
"""

from memwal_pipelines.component import MemWalTableComponent

__all__ = ["MemWalTableComponent"]
