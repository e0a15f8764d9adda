"""Which region holds which region value, and creating the region a value lacks.

Lance 14's writer does not route: it writes whatever it is given into the
region id it is opened on. A region's manifest records the spec id and the
region value it serves (`shard_spec_id`, `shard_field_entries`); Lance's own
writer keeps both when it claims such a region (tests pin that). So a value's
region is found by reading manifests, and a missing one is created by writing
its version 1 with epoch 0; the writer's claim then moves it to epoch 1.

A created region's id is derived from the spec id and value (a UUID with the
v4 version bits), so two writers that both find a value missing create the
same region and one put-if-not-exists wins: no value ever gets two regions
through us.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from memwal_core.errors import AlreadyExistsError, ConflictError
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import RegionManifest, uuid_to_proto
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.model.routing import RegionKey, RegionSpec


class Regions(Protocol):
    """What the directory needs of a table (`MemWalTable` is one): its regions' manifests."""

    def read_regions(self, regions: Iterable[str] | None = None) -> Mapping[str, RegionManifest | None]: ...

    def region_store(self, region: str) -> RegionManifestStore: ...


def region_id_for(spec_id: int, key: RegionKey) -> str:
    """The region id memwal gives a region value: stable across processes and machines."""
    digest = hashlib.sha256(repr((spec_id, key)).encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def initial_manifest(region: str, spec_id: int, key: RegionKey) -> bytes:
    """Version 1 of a new region: no writer yet (epoch 0), serving `key` under `spec_id`."""
    message = pb.ShardManifest(
        version=1, writer_epoch=0, current_generation=1, shard_spec_id=spec_id, shard_id=uuid_to_proto(region)
    )
    for field_id, value in key:
        message.shard_field_entries.add(field_id=field_id, value=value)
    return message.SerializeToString()


class RegionDirectory:
    """Region value -> region id for one table and spec; thread-safe, read once, then cached."""

    def __init__(self, table: Regions, spec: RegionSpec) -> None:
        self.table = table
        self.spec = spec
        self._lock = threading.Lock()
        self._regions: dict[RegionKey, str] | None = None

    def _serves(self, manifest: RegionManifest) -> RegionKey | None:
        if manifest.sealed or manifest.spec_id != self.spec.spec_id or not manifest.field_values:
            return None
        return manifest.field_values

    def _load(self) -> dict[RegionKey, str]:
        found: dict[RegionKey, str] = {}
        # Sorted ids: if a foreign tool made two regions for one value, every writer picks the same.
        for region, manifest in sorted(self.table.read_regions().items()):
            key = self._serves(manifest) if manifest is not None else None
            if key is not None:
                found.setdefault(key, region)
        return found

    def region_for(self, key: RegionKey) -> str:
        """The region serving `key`, created when none does."""
        with self._lock:
            if self._regions is None:
                self._regions = self._load()
            region = self._regions.get(key)
            if region is None:
                region = self._create(key)
                self._regions[key] = region
            return region

    def value_of(self, region: str) -> RegionKey | None:
        """The region value `region` serves under this spec (None: none, or no such region yet)."""
        manifest = self.table.read_regions([region]).get(region)
        return self._serves(manifest) if manifest is not None else None

    def _create(self, key: RegionKey) -> str:
        region = region_id_for(self.spec.spec_id, key)
        manifests = self.table.region_store(region)
        try:
            manifests.create_first(initial_manifest(region, self.spec.spec_id, key))
        except AlreadyExistsError:
            if self._serves(manifests.read(1)) != key:
                raise ConflictError(
                    f"region {region} already exists and serves another region value than {key!r}"
                ) from None
        return region
