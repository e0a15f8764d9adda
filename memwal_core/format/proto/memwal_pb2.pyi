from google.protobuf import any_pb2 as _any_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ShardStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTIVE: _ClassVar[ShardStatus]
    SEALED: _ClassVar[ShardStatus]
ACTIVE: ShardStatus
SEALED: ShardStatus

class UUID(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: bytes
    def __init__(self, uuid: _Optional[bytes] = ...) -> None: ...

class ShardManifest(_message.Message):
    __slots__ = ("version", "writer_epoch", "replay_after_wal_entry_position", "wal_entry_position_last_seen", "current_generation", "sstables", "shard_spec_id", "shard_id", "shard_field_entries", "status")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLAY_AFTER_WAL_ENTRY_POSITION_FIELD_NUMBER: _ClassVar[int]
    WAL_ENTRY_POSITION_LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    CURRENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SSTABLES_FIELD_NUMBER: _ClassVar[int]
    SHARD_SPEC_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    version: int
    writer_epoch: int
    replay_after_wal_entry_position: int
    wal_entry_position_last_seen: int
    current_generation: int
    sstables: _containers.RepeatedCompositeFieldContainer[SsTable]
    shard_spec_id: int
    shard_id: UUID
    shard_field_entries: _containers.RepeatedCompositeFieldContainer[ShardFieldEntry]
    status: ShardStatus
    def __init__(self, version: _Optional[int] = ..., writer_epoch: _Optional[int] = ..., replay_after_wal_entry_position: _Optional[int] = ..., wal_entry_position_last_seen: _Optional[int] = ..., current_generation: _Optional[int] = ..., sstables: _Optional[_Iterable[_Union[SsTable, _Mapping]]] = ..., shard_spec_id: _Optional[int] = ..., shard_id: _Optional[_Union[UUID, _Mapping]] = ..., shard_field_entries: _Optional[_Iterable[_Union[ShardFieldEntry, _Mapping]]] = ..., status: _Optional[_Union[ShardStatus, str]] = ...) -> None: ...

class ShardFieldEntry(_message.Message):
    __slots__ = ("field_id", "value")
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    field_id: str
    value: bytes
    def __init__(self, field_id: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class SsTable(_message.Message):
    __slots__ = ("generation", "path", "in_memory_bytes", "physical_rows", "primary_key_bytes")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    IN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_BYTES_FIELD_NUMBER: _ClassVar[int]
    generation: int
    path: str
    in_memory_bytes: int
    physical_rows: int
    primary_key_bytes: int
    def __init__(self, generation: _Optional[int] = ..., path: _Optional[str] = ..., in_memory_bytes: _Optional[int] = ..., physical_rows: _Optional[int] = ..., primary_key_bytes: _Optional[int] = ...) -> None: ...

class CompactedSsTable(_message.Message):
    __slots__ = ("shard_id", "generation")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    shard_id: UUID
    generation: int
    def __init__(self, shard_id: _Optional[_Union[UUID, _Mapping]] = ..., generation: _Optional[int] = ...) -> None: ...

class IndexCatchupProgress(_message.Message):
    __slots__ = ("index_name", "caught_up_generations")
    INDEX_NAME_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    index_name: str
    caught_up_generations: _containers.RepeatedCompositeFieldContainer[CompactedSsTable]
    def __init__(self, index_name: _Optional[str] = ..., caught_up_generations: _Optional[_Iterable[_Union[CompactedSsTable, _Mapping]]] = ...) -> None: ...

class MemWalIndexDetails(_message.Message):
    __slots__ = ("snapshot_ts_millis", "num_shards", "inline_snapshots", "sharding_specs", "maintained_indexes", "compacted_sstables", "index_catchup", "writer_config_defaults", "maintain_all_indexes")
    class WriterConfigDefaultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_TS_MILLIS_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARDS_FIELD_NUMBER: _ClassVar[int]
    INLINE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    SHARDING_SPECS_FIELD_NUMBER: _ClassVar[int]
    MAINTAINED_INDEXES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_SSTABLES_FIELD_NUMBER: _ClassVar[int]
    INDEX_CATCHUP_FIELD_NUMBER: _ClassVar[int]
    WRITER_CONFIG_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    MAINTAIN_ALL_INDEXES_FIELD_NUMBER: _ClassVar[int]
    snapshot_ts_millis: int
    num_shards: int
    inline_snapshots: bytes
    sharding_specs: _containers.RepeatedCompositeFieldContainer[ShardingSpec]
    maintained_indexes: _containers.RepeatedScalarFieldContainer[str]
    compacted_sstables: _containers.RepeatedCompositeFieldContainer[CompactedSsTable]
    index_catchup: _containers.RepeatedCompositeFieldContainer[IndexCatchupProgress]
    writer_config_defaults: _containers.ScalarMap[str, str]
    maintain_all_indexes: bool
    def __init__(self, snapshot_ts_millis: _Optional[int] = ..., num_shards: _Optional[int] = ..., inline_snapshots: _Optional[bytes] = ..., sharding_specs: _Optional[_Iterable[_Union[ShardingSpec, _Mapping]]] = ..., maintained_indexes: _Optional[_Iterable[str]] = ..., compacted_sstables: _Optional[_Iterable[_Union[CompactedSsTable, _Mapping]]] = ..., index_catchup: _Optional[_Iterable[_Union[IndexCatchupProgress, _Mapping]]] = ..., writer_config_defaults: _Optional[_Mapping[str, str]] = ..., maintain_all_indexes: _Optional[bool] = ...) -> None: ...

class ShardingSpec(_message.Message):
    __slots__ = ("spec_id", "fields")
    SPEC_ID_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    spec_id: int
    fields: _containers.RepeatedCompositeFieldContainer[ShardingField]
    def __init__(self, spec_id: _Optional[int] = ..., fields: _Optional[_Iterable[_Union[ShardingField, _Mapping]]] = ...) -> None: ...

class ShardingField(_message.Message):
    __slots__ = ("field_id", "source_ids", "transform", "expression", "result_type", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IDS_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    field_id: str
    source_ids: _containers.RepeatedScalarFieldContainer[int]
    transform: str
    expression: str
    result_type: str
    parameters: _containers.ScalarMap[str, str]
    def __init__(self, field_id: _Optional[str] = ..., source_ids: _Optional[_Iterable[int]] = ..., transform: _Optional[str] = ..., expression: _Optional[str] = ..., result_type: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("fields", "version", "index_section")
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEX_SECTION_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.RepeatedCompositeFieldContainer[Field]
    version: int
    index_section: int
    def __init__(self, fields: _Optional[_Iterable[_Union[Field, _Mapping]]] = ..., version: _Optional[int] = ..., index_section: _Optional[int] = ...) -> None: ...

class Field(_message.Message):
    __slots__ = ("name", "id", "parent_id", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: int
    parent_id: int
    metadata: _containers.ScalarMap[str, bytes]
    def __init__(self, name: _Optional[str] = ..., id: _Optional[int] = ..., parent_id: _Optional[int] = ..., metadata: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class IndexSection(_message.Message):
    __slots__ = ("indices",)
    INDICES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedCompositeFieldContainer[IndexMetadata]
    def __init__(self, indices: _Optional[_Iterable[_Union[IndexMetadata, _Mapping]]] = ...) -> None: ...

class IndexMetadata(_message.Message):
    __slots__ = ("uuid", "fields", "name", "dataset_version", "fragment_bitmap", "index_details", "index_version")
    UUID_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_BITMAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_DETAILS_FIELD_NUMBER: _ClassVar[int]
    INDEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    uuid: UUID
    fields: _containers.RepeatedScalarFieldContainer[int]
    name: str
    dataset_version: int
    fragment_bitmap: bytes
    index_details: _any_pb2.Any
    index_version: int
    def __init__(self, uuid: _Optional[_Union[UUID, _Mapping]] = ..., fields: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ..., dataset_version: _Optional[int] = ..., fragment_bitmap: _Optional[bytes] = ..., index_details: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., index_version: _Optional[int] = ...) -> None: ...
