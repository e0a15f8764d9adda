"""The region manifest protocol on local disk and S3: versions, hint, probing, collisions."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from memwal_core.errors import AlreadyExistsError, CorruptMetadataError, NotFoundError
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import uuid_to_proto
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import open_store


def manifest_bytes(region: str, version: int, epoch: int = 1, generations: int = 0) -> bytes:
    message = pb.ShardManifest(
        version=version,
        writer_epoch=epoch,
        current_generation=generations + 1,
        shard_id=uuid_to_proto(region),
        sstables=[pb.SsTable(generation=g, path=f"{g:08x}_gen_{g}") for g in range(1, generations + 1)],
    )
    return message.SerializeToString()


@pytest.fixture
def regions(store_uri: tuple[str, dict[str, str]]) -> RegionManifestStore:
    uri, options = store_uri
    return RegionManifestStore(open_store(uri, StorageOptions(options)), str(uuid.uuid4()))


def test_empty_region_has_no_manifest(regions: RegionManifestStore) -> None:
    with pytest.raises(NotFoundError, match=regions.region):
        regions.read_latest()


def test_write_next_advances_version_and_hint(regions: RegionManifestStore) -> None:
    region = regions.region
    regions.store.put_if_not_exists(regions.path(1), manifest_bytes(region, 1))
    current = regions.read_latest()
    assert current.version == 1
    for version in range(2, 12):
        regions.write_next(current, manifest_bytes(region, version, generations=version))
        current = regions.read_latest()
        assert current.version == version
        assert current.generation_numbers == list(range(1, version + 1))
        assert regions.read_hint() == version
    hint = json.loads(regions.store.read(f"{regions.dir}/version_hint.json"))
    assert hint == {"version": 11}


def test_only_one_concurrent_write_next_wins(regions: RegionManifestStore) -> None:
    region = regions.region
    regions.store.put_if_not_exists(regions.path(1), manifest_bytes(region, 1))
    base = regions.read_latest()

    def attempt(epoch: int) -> bool:
        try:
            regions.write_next(base, manifest_bytes(region, 2, epoch=epoch))
            return True
        except AlreadyExistsError:
            return False

    with ThreadPoolExecutor(12) as pool:
        wins = list(pool.map(attempt, range(1, 13)))
    assert wins.count(True) == 1
    assert regions.read_latest().writer_epoch == wins.index(True) + 1


def test_probe_finds_latest_far_beyond_a_stale_hint(regions: RegionManifestStore) -> None:
    region = regions.region
    for version in range(1, 201):
        regions.store.put_if_not_exists(regions.path(version), manifest_bytes(region, version))
    regions.store.write(f"{regions.dir}/version_hint.json", b'{"version":3}')
    assert regions.read_latest().version == 200
    regions.store.delete(f"{regions.dir}/version_hint.json")
    assert regions.read_latest().version == 200


def test_current_hint_costs_three_requests(regions: RegionManifestStore) -> None:
    region = regions.region
    for version in range(1, 6):
        regions.store.put_if_not_exists(regions.path(version), manifest_bytes(region, version))
    regions.store.write(f"{regions.dir}/version_hint.json", b'{"version":5}')
    regions.store.stats.reset()
    assert regions.read_latest().version == 5
    assert regions.store.stats.total() == 3


def test_gap_after_stale_hint_is_corrupt(regions: RegionManifestStore) -> None:
    """Probing from version 1 (no hint) stops at 2: version 4 must not be hidden behind the gap."""
    region = regions.region
    for version in [1, 2, 4]:
        regions.store.put_if_not_exists(regions.path(version), manifest_bytes(region, version))
    with pytest.raises(CorruptMetadataError, match="version 3 is missing"):
        regions.read_latest()


def test_a_version_written_between_probes_is_not_a_gap(regions: RegionManifestStore) -> None:
    """A live writer adds 3 while the probe runs: the probe sees 3 missing, then the writer's 4.

    Version 3 lands right after the HEAD that found it missing, as with a writer a
    moment ahead of a slow request. The second look finds it.
    """
    region = regions.region
    for version in [1, 2, 4]:
        regions.store.put_if_not_exists(regions.path(version), manifest_bytes(region, version))
    store = regions.store
    head = store.exists

    def head_then_writer_lands(path: str) -> bool:
        found = head(path)
        if path == regions.path(3) and not found:
            store.put_if_not_exists(regions.path(3), manifest_bytes(region, 3))
        return found

    store.exists = head_then_writer_lands  # type: ignore[method-assign]
    assert regions.read_latest().version == 4


def write_versions(regions: RegionManifestStore, last: int) -> None:
    for version in range(1, last + 1):
        regions.store.put_if_not_exists(regions.path(version), manifest_bytes(regions.region, version))


def test_stale_known_version_continues_from_the_hint(regions: RegionManifestStore) -> None:
    """A known version far behind costs the hint and one more HEAD, not a HEAD per version since."""
    write_versions(regions, 300)
    regions.write_hint(300)
    regions.store.stats.reset()
    assert regions.read_latest(known=2).version == 300
    assert regions.store.stats.snapshot() == {"head": 2, "get": 2}
    # A current known version: one HEAD and the manifest.
    regions.store.stats.reset()
    assert regions.read_latest(known=300).version == 300
    assert regions.store.stats.total() == 2


def test_stale_known_version_and_stale_hint_cost_log_n(regions: RegionManifestStore) -> None:
    write_versions(regions, 300)
    regions.write_hint(1)
    regions.store.stats.reset()
    assert regions.read_latest(known=2).version == 300
    # The known version's HEAD, the hint, about 2 log2(300) HEADs, the manifest.
    assert regions.store.stats.total() <= 24


def test_known_version_removed_by_gc_costs_no_listing(regions: RegionManifestStore) -> None:
    write_versions(regions, 300)
    regions.write_hint(300)
    for version in range(1, 101):  # GC deletes a prefix, oldest first, after pointing the hint past it
        regions.store.delete(regions.path(version))
    for known in (5, 99, 100):  # its next version gone too, or the first one kept
        regions.store.stats.reset()
        assert regions.read_latest(known=known).version == 300
        assert "list" not in regions.store.stats.snapshot()
        assert regions.store.stats.total() <= 5


def test_a_poller_that_saw_the_next_version_takes_the_hint_as_the_newest(
    regions: RegionManifestStore,
) -> None:
    """After its own HEAD found version `known + 1`, a poller reads the hint and the manifest it names
    (no HEAD past it). A hint lagging the newest gives an older version, and the poller's next probe
    (a HEAD past what it read) finds the rest; a hint behind what the poller saw is probed past."""
    write_versions(regions, 9)
    regions.write_hint(8)
    regions.store.stats.reset()
    assert regions.read_latest(known=5, moved=True).version == 8
    assert regions.store.stats.snapshot() == {"get": 2}
    assert regions.store.exists(regions.next_path(8))
    assert regions.read_latest(known=8, moved=True).version == 9
    regions.write_hint(9)
    regions.store.stats.reset()
    assert regions.read_latest(known=8, moved=True).version == 9
    assert regions.store.stats.snapshot() == {"get": 2}


def test_a_poller_never_takes_a_hint_naming_a_missing_version(regions: RegionManifestStore) -> None:
    write_versions(regions, 50)
    regions.write_hint(80)
    with pytest.raises(CorruptMetadataError, match="names manifest version 80, but the newest stored is 50"):
        regions.read_latest(known=3, moved=True)


def test_hint_naming_a_missing_version_falls_back_to_the_known_one(regions: RegionManifestStore) -> None:
    """A hint past the newest version (the newest manifest deleted) is refused, as without a known one."""
    write_versions(regions, 50)
    regions.write_hint(80)
    with pytest.raises(CorruptMetadataError, match="names manifest version 80, but the newest stored is 50"):
        regions.read_latest(known=3)
    with pytest.raises(CorruptMetadataError, match="names manifest version 80, but the newest stored is 50"):
        regions.read_latest()


def test_manifest_of_another_region_is_corrupt(regions: RegionManifestStore) -> None:
    regions.store.put_if_not_exists(regions.path(1), manifest_bytes(str(uuid.uuid4()), 1))
    with pytest.raises(CorruptMetadataError, match="belongs to region"):
        regions.read_latest()
