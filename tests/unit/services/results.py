"""Every service's result type, found rather than listed, so a new service cannot be missed."""

from __future__ import annotations

import importlib
import pkgutil

import memwal_core.services
from memwal_core.services.result import ServiceResult


def service_result_types() -> set[type[ServiceResult]]:
    """Every subclass of ServiceResult defined in memwal_core.services (every module imported first)."""
    for module in pkgutil.walk_packages(memwal_core.services.__path__, "memwal_core.services."):
        importlib.import_module(module.name)
    found: set[type[ServiceResult]] = set()
    pending = list(ServiceResult.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("memwal_core.services."):
            found.add(cls)
        pending += cls.__subclasses__()
    return found
