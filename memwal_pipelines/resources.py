"""Dagster resources: the MemWAL table, its storage options taken from the environment."""

import json
import os

from dagster import ConfigurableResource

from memwal_core.storage.options import StorageOptions
from memwal_core.table import MemWalTable


class MemWalTableResource(ConfigurableResource):  # type: ignore[type-arg]
    """A MemWAL table by URI.

    Storage options come from an environment variable holding a JSON object
    (`storage_options_env`), so credentials never enter run config, logs or
    metadata.
    """

    uri: str
    storage_options_env: str | None = None

    def storage_options(self) -> StorageOptions:
        if not self.storage_options_env:
            return StorageOptions()
        raw = os.environ.get(self.storage_options_env, "")
        return StorageOptions(json.loads(raw) if raw else {})

    def open(self) -> MemWalTable:
        return MemWalTable.open(self.uri, self.storage_options())
