"""Storage options: one value passed both to Lance and to our object store.

Secrets stay inside; `repr` and `redacted()` never show them, so an options
object can appear in logs, errors and Dagster metadata safely.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping

from memwal_core.errors import BadInputError

_SECRET_MARKERS = ("secret", "password", "token", "credential", "key_id", "access_key", "sas")


def is_secret(key: str) -> bool:
    """Whether a storage option must never be shown."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


class StorageOptions(Mapping[str, str]):
    """Lance-style storage options (`aws_endpoint`, `aws_access_key_id`, ...); immutable."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values: dict[str, str] = {str(k): str(v) for k, v in (values or {}).items()}

    @classmethod
    def parse(cls, pairs: Iterable[str]) -> StorageOptions:
        """Options from `KEY=VALUE` strings, as the CLI's `-o` takes them."""
        values: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise BadInputError(f"storage option {key.strip() or pair!r} is not KEY=VALUE")
            values[key.strip()] = value
        return cls(values)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean option, as Lance spells them ("true"/"false")."""
        raw = self._values.get(key)
        return default if raw is None else raw.strip().lower() in ("1", "true", "yes")

    def first(self, *keys: str, env: Iterable[str] = ()) -> str | None:
        """The first option set among `keys`, else the first set environment variable."""
        for key in keys:
            if self._values.get(key):
                return self._values[key]
        for name in env:
            if os.environ.get(name):
                return os.environ[name]
        return None

    def redacted(self) -> dict[str, str]:
        """A copy safe to print: secret values replaced."""
        return {k: ("***" if is_secret(k) else v) for k, v in self._values.items()}

    def as_dict(self) -> dict[str, str]:
        """A plain dict for Lance's `storage_options=`."""
        return dict(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageOptions) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"StorageOptions({self.redacted()!r})"
