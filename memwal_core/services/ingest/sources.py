"""Ingestion sources: files (Parquet, CSV, JSON lines) named by paths or globs, local or in an object store.

Both ingestion engines read a file the same way, with pyarrow: CSV and JSON
are parsed with the table's column types (so a value that does not fit fails
the read, instead of being inferred as something else), Parquet is read as
stored and cast. Spark executors read files themselves because no Hadoop S3
connector can be installed here; that also keeps Arrow types exact.

Arrow reads every file through one of its own native files (local, or its S3
client), never through a Python file object: Arrow reads on its own threads,
and a thread that calls into Python while the interpreter exits is killed
inside Arrow's C++ code, which aborts the process ("terminate called without
an active exception") after the command has already reported. s3fs only lists.

Azure and GCS sources (`az://`, `abfss://`, `gs://`) go through memwal's own
client, with the table's kind of credentials: it lists them, and downloads
each file to a temporary file (removed once read) that Arrow reads as a local
one. Arrow's own Azure and GCS clients take other credentials than Lance's
(no service account file, for one).
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memwal_core.errors import BadInputError, NotFoundError, SchemaError, StorageError, first_line
from memwal_core.model.rows import conform
from memwal_core.storage.cloud import CloudStore
from memwal_core.storage.options import StorageOptions
from memwal_core.storage.stores import is_cloud_uri, normalize_uri, open_store

FORMATS = ("parquet", "csv", "json")
_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
BATCH_ROWS = 65_536
# CSV and JSON are read in blocks, and the block size sets their memory: Arrow's CSV reader reads up
# to 32 blocks ahead (at 8 MiB an 8M-row file peaked 68 MiB above a 4M-row one and would go on to
# 256 MiB; at 1 MiB, 12 MiB above, at the same speed). JSON used to be read whole (4M rows: 346 MiB
# against 165 for 1M; by block, 155 against 137). A row may be at most one block long.
BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class Ingested:
    """What an engine read from the sources and wrote, per region; the service builds its result from it."""

    rows_read: int
    rows_written: int
    regions: dict[str, int]


@dataclass(frozen=True)
class _S3Access:
    """Where and as whom S3 sources are read: the storage options read once for both clients."""

    key: str | None
    secret: str | None
    token: str | None
    endpoint: str | None
    region: str | None
    virtual_hosted: bool

    @classmethod
    def of(cls, options: Mapping[str, str]) -> _S3Access:
        opts = StorageOptions(options)
        key = opts.first("aws_access_key_id", "access_key_id", env=["AWS_ACCESS_KEY_ID"])
        secret = opts.first("aws_secret_access_key", "secret_access_key", env=["AWS_SECRET_ACCESS_KEY"])
        return cls(
            key=key if key and secret else None,
            secret=secret if key and secret else None,
            token=opts.first(
                "aws_session_token", "session_token", "aws_token", "token", env=["AWS_SESSION_TOKEN"]
            ),
            endpoint=opts.first("aws_endpoint", "endpoint", "aws_endpoint_url", env=["AWS_ENDPOINT_URL"]),
            region=opts.first("aws_region", "region", env=["AWS_REGION", "AWS_DEFAULT_REGION"]),
            virtual_hosted=opts.flag("aws_virtual_hosted_style_request"),
        )


def _s3fs(options: Mapping[str, str]) -> Any:
    """An s3fs filesystem (for listing) from Lance-style storage options; credentials stay in the options."""
    import s3fs

    access = _S3Access.of(options)
    kwargs: dict[str, Any] = {}
    if access.key:
        kwargs.update(key=access.key, secret=access.secret, token=access.token)
    if access.endpoint:
        kwargs["endpoint_url"] = access.endpoint
    if access.region:
        kwargs["client_kwargs"] = {"region_name": access.region}
    return s3fs.S3FileSystem(**kwargs)


@functools.lru_cache(maxsize=4)
def _arrow_s3(options: tuple[tuple[str, str], ...]) -> Any:
    """Arrow's own S3 client (for reading) from the same options, with memwal's time limits; one per options."""
    import pyarrow.fs as pafs

    access = _S3Access.of(dict(options))
    limits = StorageOptions(dict(options)).time_limits()
    kwargs: dict[str, Any] = {
        "connect_timeout": limits.connect,
        "request_timeout": limits.request,
        "force_virtual_addressing": access.virtual_hosted,
    }
    if access.key:
        kwargs.update(access_key=access.key, secret_key=access.secret, session_token=access.token)
    if access.endpoint:
        scheme = access.endpoint.partition("://")[0] if "://" in access.endpoint else "https"
        kwargs.update(endpoint_override=access.endpoint, scheme=scheme)
    if access.region:
        kwargs["region"] = access.region
    return pafs.S3FileSystem(**kwargs)


@dataclass(frozen=True)
class SourceFiles:
    """The files of one ingestion, resolved and checked before anything is written; picklable."""

    files: tuple[str, ...]
    formats: tuple[str, ...]
    storage_options: tuple[tuple[str, str], ...] = ()

    def format_of(self, path: str) -> str:
        return self.formats[self.files.index(path)]

    def open(self, path: str) -> pa.NativeFile:
        """Arrow's own file for `path` (see the module's note: never a Python file object)."""
        if path.startswith("s3://"):
            try:
                return _arrow_s3(self.storage_options).open_input_file(path[len("s3://") :])
            except OSError as exc:
                raise StorageError(f"cannot read source {path}: {first_line(exc)}") from None
        if is_cloud_uri(path):
            return _downloaded(path, dict(self.storage_options))
        return pa.OSFile(path, "rb")

    def read(self, path: str, schema: pa.Schema) -> Iterator[pa.Table]:
        """The rows of one file conformed to `schema`, in batches; SchemaError names the file and column."""
        try:
            with self.open(path) as handle:
                yield from (
                    conform(t, schema, what=f"source {path}")
                    for t in _read(handle, self.format_of(path), schema)
                )
        except SchemaError:
            raise
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as exc:
            if "straddling object" in str(exc):  # Arrow's advice (a larger block) is not the user's to take
                raise SchemaError(
                    f"source {path}: a row is longer than {BLOCK_BYTES >> 20} MiB, the most memwal reads"
                ) from None
            raise SchemaError(f"source {path}: {first_line(exc)}") from None
        except OSError as exc:  # a local file we may not read is bad input; S3 trouble is the store's
            failure = StorageError if is_cloud_uri(path) else BadInputError
            raise failure(f"cannot read source {path}: {first_line(exc)}") from None


def _read(handle: pa.NativeFile, fmt: str, schema: pa.Schema) -> Iterator[pa.Table]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        # One row group at a time: `iter_batches` held memory in step with the whole file (a 4M-row file
        # of 100k-row groups: 225 MiB against 101 MiB for 200k rows; by row group, 118 against 105).
        source = pq.ParquetFile(handle)
        for index in range(source.num_row_groups):
            for batch in source.read_row_group(index).to_batches(max_chunksize=BATCH_ROWS):
                yield pa.Table.from_batches([batch])
        return
    if fmt == "csv":
        import pyarrow.csv as pcsv

        types = {f.name: f.type for f in schema}
        reader = pcsv.open_csv(
            handle,
            read_options=pcsv.ReadOptions(block_size=BLOCK_BYTES),
            convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=True),
        )
    else:
        import pyarrow.json as pjson

        explicit = pa.schema([pa.field(f.name, f.type) for f in schema])
        reader = pjson.open_json(
            handle,
            read_options=pjson.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=pjson.ParseOptions(explicit_schema=explicit),
        )
    for batch in reader:
        yield pa.Table.from_batches([batch])


def infer_format(path: str) -> str:
    """The format a file's extension names."""
    found = _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    if found is None:
        raise BadInputError(
            f"cannot tell the format of source {path} from its name: pass --format parquet|csv|json"
        )
    return found


def resolve_sources(
    paths: Sequence[str], fmt: str | None = None, storage_options: Mapping[str, str] | None = None
) -> SourceFiles:
    """Expand globs and directories into files; NotFoundError for a path that matches nothing."""
    if not paths:
        raise BadInputError("no source given")
    if fmt is not None and fmt not in FORMATS:
        raise BadInputError(f"unknown source format {fmt!r} (use parquet, csv or json)")
    options = dict(storage_options or {})
    files: list[str] = []
    for path in map(normalize_uri, paths):
        if path.startswith("s3://"):
            matched = _expand_s3(path, options)
        else:
            matched = _expand_cloud(path, options) if is_cloud_uri(path) else _expand_local(path)
        if not matched and os.path.isdir(path):
            raise BadInputError(
                f"source folder {path} holds no files (names starting with . or _ are skipped)"
            )
        if not matched:
            raise NotFoundError(f"source {path} does not exist")
        # Opening a FIFO or a device would block or read forever; a directory a glob matched is no file.
        irregular = [f for f in matched if not is_cloud_uri(f) and not os.path.isfile(f)]
        if irregular:
            raise BadInputError(f"source {irregular[0]} is not a regular file")
        files.extend(matched)
    unique = tuple(dict.fromkeys(files))
    formats = tuple(fmt or infer_format(f) for f in unique)
    return SourceFiles(unique, formats, tuple(sorted(options.items())))


def _expand_local(path: str) -> list[str]:
    # Absolute: Spark executors may run in another working directory.
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(path):
        return sorted(
            os.path.join(root, name)
            for root, _dirs, names in os.walk(path)
            for name in names
            if not name.startswith((".", "_"))
        )
    return sorted(glob.glob(path)) if glob.has_magic(path) else ([path] if os.path.exists(path) else [])


def _expand_s3(path: str, options: Mapping[str, str]) -> list[str]:
    fs = _s3fs(options)
    bare = path[len("s3://") :]
    try:
        if glob.has_magic(bare):
            found = fs.glob(bare)
        elif fs.isdir(bare):
            found = [p for p in fs.find(bare) if not os.path.basename(p).startswith((".", "_"))]
        else:
            found = [bare] if fs.exists(bare) else []
    except OSError as exc:
        raise StorageError(f"cannot list source {path}: {first_line(exc)}") from None
    return sorted(f"s3://{p}" for p in found)


def _cloud(path: str, options: Mapping[str, str]) -> tuple[CloudStore, str, str]:
    """memwal's client for the container or bucket of an Azure or GCS source, its URI, and the key."""
    scheme, _, rest = path.partition("://")
    authority, _, key = rest.partition("/")
    root = f"{scheme}://{authority}"
    store = open_store(root, StorageOptions(options))
    assert isinstance(store, CloudStore)
    return store, root, key


def _expand_cloud(path: str, options: Mapping[str, str]) -> list[str]:
    """Files of an Azure or GCS source: a glob (`*`, `?` and `[...]` within one path segment), a folder
    (its files, names starting with . or _ skipped, as for S3), or one file."""
    store, root, key = _cloud(path, options)
    if glob.has_magic(key):
        parts = key.split("/")
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        found = [
            info.path
            for info in store.list_files("/".join(parts[:fixed]), recursive=True)
            if _matches(info.path.split("/"), parts)
        ]
    else:
        found = [
            info.path
            for info in store.list_files(key, recursive=True)
            if not os.path.basename(info.path).startswith((".", "_"))
        ]
        if not found and key and store.exists(key):
            found = [key]
    return sorted(f"{root}/{p}" for p in found)


def _matches(names: list[str], patterns: list[str]) -> bool:
    return len(names) == len(patterns) and all(map(fnmatch.fnmatchcase, names, patterns))


def _downloaded(path: str, options: Mapping[str, str]) -> pa.NativeFile:
    """An Azure or GCS source as Arrow's own local file: downloaded to a temporary file whose name is
    removed at once, so the file goes when Arrow closes it."""
    store, _, key = _cloud(path, options)
    fd, name = tempfile.mkstemp(prefix="memwal-source-")
    try:
        with os.fdopen(fd, "wb") as target:
            store.read_into(key, target)
        return pa.OSFile(name, "rb")
    finally:
        os.unlink(name)
