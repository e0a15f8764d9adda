"""memwal_core: the library behind memwal's services. No Dagster imports here."""

from memwal_core.lance_log import quiet_lance_log

# Before anything imports lance: Lance reads its log settings once, when it loads.
quiet_lance_log()

from memwal_core.errors import MemwalError  # noqa: E402
from memwal_core.storage.options import StorageOptions  # noqa: E402
from memwal_core.table import MemWalTable  # noqa: E402

__all__ = ["MemWalTable", "MemwalError", "StorageOptions"]
