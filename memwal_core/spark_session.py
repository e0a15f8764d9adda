"""The SparkSession memwal's Spark engine (`services/engine.py`) uses when none is injected, and its tasks.

Two ways to reach Spark, named by configuration and never both:

- a master (classic): `local[*,2]` by default, MEMWAL_SPARK_MASTER or an
  explicit URL (a standalone `spark://host:port`); this process is the driver,
  and executors run this interpreter, so they import the same pylance;
- a Spark Connect remote (`sc://host:port`, MEMWAL_SPARK_REMOTE): the driver
  is the Connect server, this process only a client, so a Dagster run neither
  starts a JVM nor needs executors to reach back into it.

Tasks go through the DataFrame API alone (`run_tasks`), which both kinds of
session serve alike, and name their jobs (`described`): a tag, which both
kinds carry to the server (Spark Connect's UI tab and the REST API show it),
and on a classic session the Spark UI's job description too.

Executors' Python workers fork from memwal's own daemon (`spark_daemon.py`,
`DAEMON_MODULE`), with pyarrow, lance and memwal's tasks loaded. Spark
Connect starts one such daemon per session and, in Spark 4.3, never stops it
while the server lives, so memwal's clients share one session per server and
user (`connect_session`): its daemon and idle workers stay warm from one run
to the next, and a server does not collect a daemon per run. A classic session started here is quiet: Spark's log4j
banner and the JVM's notices go to a log file, and lance's fork-safety
warning (pyspark forks the JVM's launcher) is not shown, unless `verbose`.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import logging
import os
import pickle
import re
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from memwal_core.errors import BadInputError, EngineJobError, MemwalError, first_line

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

# Local mode retries a failed task once (local[N,F]); plain local[*] would not retry at all.
DEFAULT_MASTER = "local[*,2]"
LOOPBACK = "127.0.0.1"
MASTER_ENV = "MEMWAL_SPARK_MASTER"
REMOTE_ENV = "MEMWAL_SPARK_REMOTE"
# Spark's own output (log4j, the JVM's notices) of a quiet classic session goes here.
LOG_ENV = "MEMWAL_SPARK_LOG"
# Retries of an unreachable Connect server (backoff 0.05 s x4 each time, at most 5 s): ~10 s in all.
CONNECT_RETRIES = 5
# A column per task outcome: the item's index and its pickled result.
TASK_SCHEMA = "item long, result binary"
# What a failed gRPC call (Spark Connect) says, within its multi-line repr.
_GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"$', re.MULTILINE)
# What Spark says when an executor's Python daemon or worker fails to start, before its Java frames.
_WORKER_ERROR = re.compile(r"^Error from python worker:\s*\n\s*(\S.*)$", re.MULTILINE)
# More rows than any cluster has cores, so every one of `range`'s default partitions holds one.
_PARALLELISM_PROBE_ROWS = 1 << 20
# What executors fork their Python workers from: pyspark's daemon with memwal's imports done first.
DAEMON_MODULE = "memwal_core.spark_daemon"
# A shared Connect session closed by the server (idle past its timeout) is replaced by one named
# after the hour, so clients still share one; Spark's default idle timeout is an hour.
_FALLBACK_PERIOD = 3600
# Sessions this process joined rather than opened: ending them must leave them to the others.
_shared_sessions: set[str] = set()


def check_spark_target(master: str | None, remote: str | None) -> None:
    """Refuse a master and a Connect remote named together: which Spark to use would be a guess."""
    if master and remote:
        raise BadInputError(
            f"name a Spark master or a Spark Connect remote, not both (master {master!r}, remote {remote!r})"
        )
    if remote and not remote.startswith("sc://"):
        raise BadInputError(f"a Spark Connect remote is an sc://HOST:PORT URL, not {remote!r}")


def remote_holds_credentials(remote: str) -> bool:
    """Whether a Spark Connect URL carries a secret: a `;token=` parameter (or user info)."""
    params = remote.split("/", 3)[-1] if remote.count("/") >= 3 else ""
    names = {p.split("=", 1)[0].strip().lower() for p in params.split(";") if "=" in p}
    return "token" in names or "@" in remote.removeprefix("sc://").split("/", 1)[0]


def spark_target(master: str | None = None, remote: str | None = None) -> tuple[str | None, str | None]:
    """(master, remote) to use: the ones named, else MEMWAL_SPARK_MASTER / MEMWAL_SPARK_REMOTE, else none."""
    check_spark_target(master, remote)
    if master or remote:
        return master, remote
    from_env = os.environ.get(MASTER_ENV) or None, os.environ.get(REMOTE_ENV) or None
    if from_env[0] and from_env[1]:
        raise BadInputError(f"set {MASTER_ENV} or {REMOTE_ENV}, not both")
    check_spark_target(*from_env)
    return from_env


def spark_conf(master: str | None = None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings for a classic memwal SparkSession: Arrow on, this interpreter on executors, a local driver on loopback."""
    master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    settings = {
        "spark.master": master,
        "spark.app.name": "memwal",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": os.environ.get("MEMWAL_SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.python.daemon.module": DAEMON_MODULE,
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        settings["spark.driver.host"] = LOOPBACK
        settings["spark.driver.bindAddress"] = LOOPBACK
    return {**settings, **(conf or {})}


def spark_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    remote: str | None = None,
    verbose: bool = False,
) -> SparkSession:
    """A Connect session on `remote`, else the active classic SparkSession or a new one on `master`.

    Without either, MEMWAL_SPARK_REMOTE or MEMWAL_SPARK_MASTER decides; a
    Connect session is always a new one (a process may hold a classic one
    beside it, as the tests do).
    """
    master, remote = spark_target(master, remote)
    if remote:
        return connect_session(remote)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(master, conf).items():
        builder = builder.config(key, value)
    with _quiet_launch(verbose):
        session = builder.getOrCreate()
    if not verbose:
        session.sparkContext.setLogLevel("ERROR")
        # Py4J says "Closing down clientserver connection" on stderr when the process exits.
        logging.getLogger("py4j").setLevel(logging.WARNING)
    return session


def shared_session_ids(remote: str, now: float | None = None) -> list[str]:
    """The session ids memwal's clients of `remote` share, first choice first: one per server and user,
    then one for the current hour (should the server have closed the first)."""
    server = remote.split("/;", 1)[0].rstrip("/")
    hour = int((time.time() if now is None else now) // _FALLBACK_PERIOD)
    labels = (f"{getpass.getuser()}@{server}", f"{getpass.getuser()}@{server}#{hour}")
    return [str(uuid.UUID(bytes=hashlib.sha256(label.encode()).digest()[:16], version=4)) for label in labels]


def with_session_id(remote: str, session_id: str) -> str:
    """`remote` with a `session_id` parameter (sc://HOST:PORT/;name=value;...)."""
    return (
        f"{remote};session_id={session_id}"
        if "/;" in remote
        else f"{remote.rstrip('/')}/;session_id={session_id}"
    )


def connect_session(remote: str) -> SparkSession:
    """A Spark Connect session on `remote` (`sc://HOST:PORT`), shared with memwal's other clients of it;
    no JVM in this process.

    Every run joining the same session is what keeps the server's Python
    workers warm between runs (see the module's docstring). A session the
    server closed (idle past `spark.connect.session.manager.defaultSessionTimeout`)
    cannot be joined again: the hour's session is joined instead, else a new
    one of this process's own. A `session_id` named in `remote` is used as is.
    """
    if "session_id=" in remote:
        return _connect(remote)
    for session_id in shared_session_ids(remote):
        session = _connect(with_session_id(remote, session_id))
        try:
            session.version  # noqa: B018  # the first call: it joins (or creates) the session
        except Exception as exc:
            session.client.close()
            if "SESSION_CLOSED" not in str(exc):
                raise
            continue
        _shared_sessions.add(session_id)
        return session
    return _connect(remote)


def _connect(remote: str) -> SparkSession:
    """A Connect session on `remote` with memwal's bounded retries."""
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # The Connect session serves the classic session's DataFrame API (its own class, not a subclass).
    session = cast("SparkSession", ConnectSession.builder.remote(remote).create())
    # PySpark's default retries an unreachable server for 10 minutes; a job fails after ~10 s of it.
    session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=5000)])
    # The client warns before it raises; the error memwal reports says it once.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    return session


def is_connect(session: SparkSession) -> bool:
    """Whether `session` is a Spark Connect client (else a classic session of this process)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def end_session(session: SparkSession) -> None:
    """End a Connect session memwal opened: one shared with other clients only loses this client's
    channel (releasing it would close it for them all); one of its own is released on the server. A
    classic session is the process's: it is left as it is."""
    if not is_connect(session):
        return
    if cast(Any, session).session_id in _shared_sessions:
        session.client.close()
    else:
        session.stop()


@contextlib.contextmanager
def described(session: SparkSession, description: str) -> Iterator[None]:
    """Name the jobs this thread runs meanwhile, as Spark's UI and REST API show them.

    A tag on both kinds of session (Spark Connect writes its own job
    descriptions, but carries the client's tags to its jobs and its UI tab);
    on a classic session, also the job description the Spark UI lists.
    """
    tag = "memwal " + description.replace(",", ";")
    session.addTag(tag)
    context = None if is_connect(session) else session.sparkContext
    previous = context.getLocalProperty("spark.job.description") if context is not None else None
    if context is not None:
        context.setJobDescription(f"memwal {description}")
    try:
        yield
    finally:
        session.removeTag(tag)
        if context is not None:
            context.setJobDescription(previous)  # type: ignore[arg-type]


@contextlib.contextmanager
def _quiet_launch(verbose: bool) -> Iterator[None]:
    """While the driver JVM starts: its stderr (log4j banner, JVM notices) to a log file, lance's fork warning off.

    The JVM inherits this process's stderr when pyspark launches it, so the
    descriptor is pointed at the log file for the launch only; this process's
    own stderr is restored afterwards.
    """
    if verbose:
        yield
        return
    path = os.environ.get(LOG_ENV) or os.path.join(tempfile.gettempdir(), f"memwal-spark-{os.getuid()}.log")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*fork", category=UserWarning)
            os.dup2(log.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def default_parallelism(session: SparkSession) -> int:
    """How many tasks the session runs at once: the partitions `range` gets by default (its cores).

    Asked through the DataFrame API (`sparkContext.defaultParallelism` does not
    exist on Spark Connect): one small job over a range cut the default way.
    """
    parts = session.range(_PARALLELISM_PROBE_ROWS).selectExpr("spark_partition_id() AS part")
    row = parts.agg({"part": "max"}).first()
    return max(1, int(row[0]) + 1) if row is not None else 1


def _task_runner(
    task: Callable[[T], R], items: Sequence[T]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The `mapInArrow` function: each input row names an item by index; out comes its pickled result.

    Task and items travel inside the function (cloudpickled by PySpark), so
    nothing but the indexes and the results passes through the JVM.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        schema = pa.schema([("item", pa.int64()), ("result", pa.binary())])
        for batch in batches:
            for index in batch.column(0).to_pylist():
                result = pickle.dumps(task(items[index]))
                yield pa.RecordBatch.from_pydict({"item": [index], "result": [result]}, schema=schema)

    return run


def run_tasks(session: SparkSession, task: Callable[[T], R], items: Sequence[T], *, what: str) -> list[R]:
    """`task(item)` for every item, one Spark task each, the results in item order.

    A range of item indexes cut one per partition, `mapInArrow` over it and
    the results collected as Arrow: DataFrame calls that a classic session
    and a Spark Connect session both serve. Errors propagate as PySpark's.
    """
    count = len(items)
    frame = session.range(0, count, 1, numPartitions=count)
    with described(session, what):
        collected: Any = frame.mapInArrow(_task_runner(task, list(items)), TASK_SCHEMA).toArrow()
    by_item = dict(
        zip(collected.column("item").to_pylist(), collected.column("result").to_pylist(), strict=True)
    )
    if len(by_item) != count:
        raise EngineJobError(f"{what}: Spark returned {len(by_item)} result(s) for {count} task(s)")
    return [pickle.loads(by_item[index]) for index in range(count)]


def executor_error(exc: Exception) -> str:
    """The most telling line of a Spark failure: how the task's own exception begins (`Type: message`).

    Spark wraps it in the worker's traceback (and Java frames); its first line
    follows the traceback's last frame. Without a traceback, the last line stands.
    """
    text = str(exc)
    grpc = _GRPC_DETAILS.search(text)  # a Connect server gone: gRPC's own status text
    if grpc is not None:
        return first_line(grpc.group(1))
    worker = _WORKER_ERROR.search(text)  # a Python worker that did not start (memwal missing there?)
    if worker is not None:
        return f"Python workers did not start: {first_line(worker.group(1))}"
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = lines[frames[-1] + 1 :] if frames else []
    raised = next((line for line in after if line.strip() and not line[0].isspace()), None)
    stated = [line.strip() for line in lines if line.strip()]
    return first_line(raised or (stated or [type(exc).__name__])[-1])


def executor_memwal_error(exc: Exception) -> MemwalError | None:
    """The memwal error an executor raised, rebuilt on the driver (so bad input still exits 2)."""
    from memwal_core import errors

    for line in reversed(str(exc).splitlines()):
        name, sep, message = line.strip().partition(": ")
        if sep and name.startswith("memwal_core.errors."):
            cls = getattr(errors, name.rsplit(".", 1)[-1], None)
            if isinstance(cls, type) and issubclass(cls, MemwalError):
                return cls(message)
    return None
