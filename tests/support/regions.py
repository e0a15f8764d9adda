"""Region manifests written directly, for tests and benchmarks that need many regions cheaply.

Lance's writer takes about a second per region; these manifests hold the
same fields (a few versions, listed generations, WAL hints, region field
values) without any data behind them, which is all a snapshot reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from memwal_core.format.naming import MEM_WAL_DIR, REGION_WAL_DIR, wal_entry_name
from memwal_core.format.proto import memwal_pb2 as pb
from memwal_core.format.regions import uuid_to_proto
from memwal_core.model.region_store import RegionManifestStore
from memwal_core.model.table import MemWalTable
from memwal_core.storage.options import StorageOptions

FieldValues = Callable[[int], list[tuple[str, bytes]]]


def write_regions(
    uri: str,
    options: Mapping[str, str],
    count: int,
    *,
    versions: int = 2,
    generations: int = 3,
    wal_entries: int = 4,
    wal_hint: int = 2,
    spec_id: int = 0,
    field_values: FieldValues | None = None,
) -> list[str]:
    """Write `count` regions with manifests 1..`versions` and `wal_entries` empty WAL entries.

    The manifests' WAL hint (`wal_entry_position_last_seen`) is `wal_hint`, so a
    snapshot must probe past it to find the last entry. Returns the region ids.
    """
    regions = [str(uuid.uuid4()) for _ in range(count)]
    with MemWalTable(uri, StorageOptions(options)) as table:

        def write(numbered: tuple[int, str]) -> None:
            number, region = numbered
            store = RegionManifestStore(table.store, region)
            for version in range(1, versions + 1):
                message = pb.ShardManifest(
                    version=version,
                    writer_epoch=1,
                    replay_after_wal_entry_position=min(wal_hint, wal_entries),
                    wal_entry_position_last_seen=wal_hint,
                    current_generation=generations + 1,
                    shard_spec_id=spec_id,
                    shard_id=uuid_to_proto(region),
                    sstables=[
                        pb.SsTable(generation=g, path=f"{g:08x}_gen_{g}") for g in range(1, generations + 1)
                    ],
                    shard_field_entries=[
                        pb.ShardFieldEntry(field_id=f, value=v) for f, v in (field_values or _none)(number)
                    ],
                )
                table.store.put_if_not_exists(store.path(version), message.SerializeToString())
            table.store.write(f"{store.dir}/version_hint.json", f'{{"version":{versions}}}'.encode())
            for position in range(1, wal_entries + 1):
                table.store.put_if_not_exists(
                    f"{MEM_WAL_DIR}/{region}/{REGION_WAL_DIR}/{wal_entry_name(position)}", b""
                )

        table.store.map(write, list(enumerate(regions)))
    return regions


def _none(_number: int) -> list[tuple[str, bytes]]:
    return []
