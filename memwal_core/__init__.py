"""memwal_core: the library behind memwal's services. No Dagster imports here."""

from memwal_core.errors import MemwalError
from memwal_core.storage.options import StorageOptions
from memwal_core.table import MemWalTable

__all__ = ["MemWalTable", "MemwalError", "StorageOptions"]
