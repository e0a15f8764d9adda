"""The one rule for which indexes the MemWAL maintains, and the services that ask it."""

from __future__ import annotations

import uuid
from pathlib import Path

import lance
from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context

from memwal_core.format.index_details import IndexDetails
from memwal_core.model.indexes import TableIndex, maintained_indexes
from memwal_core.model.table import MemWalTable
from memwal_core.services.compact import compact
from memwal_core.services.merge.service import merge
from memwal_pipelines.build import build_definitions
from memwal_pipelines.config import TableConfig
from memwal_pipelines.keys import TableKeys
from memwal_pipelines.sensors import CATCHUP_SENSOR
from tests.support.model import KEYED_SCHEMA, ModelTable

BTREE = "/lance.table.BTreeIndexDetails"
VECTOR = "/lance.table.VectorIndexDetails"
BITMAP = "/lance.table.BitmapIndexDetails"
MEM_WAL = "/lance.table.MemWalIndexDetails"


def details(listed: list[str], all_indexes: bool) -> IndexDetails:
    return IndexDetails(
        table_version=3,
        merged={},
        index_catchup={},
        maintained_indexes=tuple(listed),
        maintain_all_indexes=all_indexes,
        num_regions=0,
        snapshot_ts_millis=0,
        has_inline_snapshot=False,
        raw=b"",
    )


TABLE = [
    TableIndex("__lance_mem_wal", MEM_WAL),
    TableIndex("__lance_frag_reuse", "/lance.table.FragmentReuseIndexDetails"),
    TableIndex("vec_idx", VECTOR),
    TableIndex("cat_idx", BITMAP),
    TableIndex("__user_idx", BTREE),  # Lance lets a user index start with "__"
]


def test_all_indexes_means_every_user_index_and_lists_those_memtables_hold() -> None:
    rule = maintained_indexes(details([], True), TABLE)
    assert rule.names == ("__user_idx", "cat_idx", "vec_idx")
    assert rule.missing == ()
    # A bitmap index is caught up and waited for, but Lance's writer refuses to list it.
    assert rule.wanted_list == ("__user_idx", "vec_idx")
    assert rule.list_outdated and rule.list_added == ["__user_idx", "vec_idx"] and rule.list_removed == []


def test_all_indexes_drops_a_dropped_index_from_the_list() -> None:
    rule = maintained_indexes(details(["gone_idx", "vec_idx"], True), TABLE)
    assert rule.names == ("__user_idx", "cat_idx", "vec_idx")
    assert rule.missing == ("gone_idx",)
    assert rule.list_removed == ["gone_idx"] and rule.list_added == ["__user_idx"]


def test_listed_indexes_are_the_users_choice_and_a_dropped_one_constrains_nothing() -> None:
    rule = maintained_indexes(details(["vec_idx", "gone_idx"], False), TABLE)
    assert rule.names == ("vec_idx",)
    assert rule.missing == ("gone_idx",)
    assert not rule.list_outdated  # never widened nor trimmed: the list stays as the user wrote it
    assert maintained_indexes(details([], False), TABLE).names == ()


def test_a_list_in_step_is_not_rewritten() -> None:
    rule = maintained_indexes(details(["__user_idx", "vec_idx"], True), TABLE)
    assert not rule.list_outdated and rule.list_added == rule.list_removed == []


def test_compaction_restores_the_catchup_of_maintained_indexes_only(tmp_path: Path) -> None:
    """Lance records catch-up for every index; an unlisted one is not compaction's to restore
    (asking catch-up for it used to fail the run after the compaction had committed)."""
    uri = str(tmp_path / "t")
    model = ModelTable(
        uri,
        KEYED_SCHEMA,
        ["id"],
        [{"id": i, "v": "base"} for i in range(40)],
        btree_indexes=["id", "v"],
        maintained_indexes=["id_idx"],
    )
    region = str(uuid.uuid4())
    for g in range(3):
        model.write(region, [("put", [{"id": 100 * g + k, "v": f"g{g}"} for k in range(8)])])
    with MemWalTable.open(uri) as table:
        merge(table)
        lance.dataset(uri).optimize.optimize_indices()
        merged = table.index_details().merged
        assert set(table.index_details().index_catchup) == {"id_idx", "v_idx"}

        result = compact(table, target_rows_per_fragment=100_000)

        assert result.catchup_restored == ["id_idx"]
        assert table.index_details().index_catchup["id_idx"] == merged
    model.assert_merged()


def test_dagster_catchup_sensor_and_job_list_an_index_created_later(tmp_path: Path) -> None:
    """A new index is caught up from birth, so no lag starts a run: the out-of-step list must."""
    uri = str(tmp_path / "t")
    ModelTable(uri, KEYED_SCHEMA, ["id"], [{"id": i, "v": "base"} for i in range(40)])
    lance.dataset(uri).create_scalar_index("v", "BTREE", name="v_idx")
    keys = TableKeys(TableConfig(name="t", uri=uri))
    definitions = build_definitions([keys.table])
    sensor = definitions.resolve_sensor_def(CATCHUP_SENSOR)
    instance = DagsterInstance.ephemeral()

    def tick() -> list[RunRequest]:
        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            result = sensor(context)
        assert isinstance(result, SensorResult)
        return list(result.run_requests or [])

    (request,) = tick()
    assert request.job_name == "t_catchup" and request.run_key == f"t:catchup:{lance.dataset(uri).version}"
    run = definitions.resolve_job_def("t_catchup").execute_in_process(instance=instance)
    assert run.success
    assert lance.dataset(uri).mem_wal_index_details()["maintained_indexes"] == ["v_idx"]
    assert not tick(), "listed and caught up: no run"
