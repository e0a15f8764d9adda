"""Engines: where the independent tasks of a merge, a compaction or an ingestion run.

Each of those services cuts its work into tasks that need nothing from one
another (the collapse units of a merge batch, Lance's rewrite tasks, the
files and then the regions of an ingestion) and hands them to one engine.
`local` runs them on threads of this process, with no JVM. `spark` runs one
Spark task per item on executors, which are other processes, perhaps on
other hosts: it is `remote`, so whatever a task produces beyond a small
result must go through the table's storage, never through memory.

Spark has fixed costs (a session, Python workers, tasks scheduled and their
results shipped back) that a small round never earns back, so the engine a
pipeline names `spark` is `SparkWhereItPays`: each round asks
`for_round(rows, bytes)`, and a round smaller than its `SparkThreshold` runs
on threads of this process without importing pyspark or opening a session.
An engine named outright (`SparkEngine`, `--engine spark`) runs every round.

Either way a task's `MemwalError` comes back as itself (bad input found on an
executor still exits 2), and any other failure as one `EngineJobError`
naming the job, so callers handle one shape of failure whatever ran it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple, TypeVar

from memwal_core.arguments import Amount, Count, check_fields, checked
from memwal_core.errors import BadInputError, EngineJobError, MemwalError, first_line
from memwal_core.services.defaults import DEFAULT_SPARK_MIN_BYTES, DEFAULT_SPARK_MIN_ROWS, ENGINES
from memwal_core.storage.object_store import map_waiting

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

# Tasks at once in one process: Lance's reads and rewrites and pandas release the GIL for most of theirs.
DEFAULT_THREADS = 8


class Chosen(NamedTuple):
    """The engine a round runs on, and why (as the CLI's report and a run's metadata say it)."""

    engine: Engine
    reason: str


class Engine(ABC):
    """Runs a service's tasks; `remote` engines run them in other processes."""

    name: ClassVar[str]
    remote: ClassVar[bool]

    @abstractmethod
    def parallelism(self) -> int:
        """How many tasks run at once: what a service sizes its cuts by."""

    @abstractmethod
    def run(
        self, task: Callable[[T], R], items: Sequence[T], *, what: str, waiting: int | None = None
    ) -> list[R]:
        """`task(item)` for every item, the results in item order; `what` names the job in errors.

        `waiting`: tasks mostly wait on storage, so an engine running them in
        this process may run up to that many at once (its threads are sized for CPU).
        """

    def for_round(self, rows: int, size: int) -> Chosen:
        """The engine a round of `rows` rows and `size` bytes runs on: this one, as it was named."""
        return Chosen(self, "named")


class LocalEngine(Engine):
    """Threads of this process: the baseline, and the engine for work one machine holds."""

    name = "local"
    remote = False

    @checked
    def __init__(self, threads: Count | None = None) -> None:
        self.threads = threads or DEFAULT_THREADS

    def parallelism(self) -> int:
        return self.threads

    def run(
        self, task: Callable[[T], R], items: Sequence[T], *, what: str, waiting: int | None = None
    ) -> list[R]:
        if not items:
            return []
        try:
            if waiting is not None and waiting > self.threads:
                return map_waiting(task, items, waiting)  # tasks that wait on storage: the I/O pool
            with ThreadPoolExecutor(min(self.threads, len(items))) as pool:
                return list(pool.map(task, items))
        except MemwalError:
            raise
        except Exception as exc:
            raise EngineJobError(f"{what}: a task failed: {first_line(exc)}") from exc


class SparkEngine(Engine):
    """One Spark task per item, on the injected session or one started (or connected) on first use.

    The session is injected where a caller owns it (a test's shared session),
    or its factory (`open_session`: a Dagster run's, built on first use);
    otherwise `spark_session(master=..., remote=...)` starts
    a classic one or connects to a Spark Connect server (`sc://`) only when a
    job first needs it, so building the engine costs nothing. Tasks go
    through the DataFrame API alone (a range of item indexes, `mapInArrow`,
    results collected as Arrow), never `sparkContext` or RDDs, so the same
    code runs on a classic session and on Spark Connect. Tasks import pylance
    on the executor, inside their code.
    """

    name = "spark"
    remote = True

    @checked
    def __init__(
        self,
        session: SparkSession | None = None,
        *,
        open_session: Callable[[], SparkSession] | None = None,
        master: str | None = None,
        remote: str | None = None,
        verbose: bool = False,
    ) -> None:
        from memwal_core.spark_session import check_spark_target

        check_spark_target(master, remote)
        self._session = session
        self._open_session = open_session
        self._master = master
        self._remote = remote
        self._verbose = verbose
        self._opened_remote = False
        self._parallelism: int | None = None

    @property
    def session(self) -> SparkSession:
        if self._session is None and self._open_session is not None:
            self._session = self._open_session()
        if self._session is None:
            from memwal_core.spark_session import spark_session, spark_target

            master, remote = spark_target(self._master, self._remote)
            self._session = spark_session(master, remote=remote, verbose=self._verbose)
            self._opened_remote = remote is not None
        return self._session

    def close(self) -> None:
        """End the Spark Connect session this engine opened (its server-side state goes at once).

        An injected session is its owner's, and a classic one the process's: both are left as they are.
        """
        if self._opened_remote and self._session is not None:
            from memwal_core.spark_session import end_session

            end_session(self._session)
            self._session = None

    def _failed(self, what: str, exc: Exception) -> MemwalError:
        """A Spark failure as memwal's error; a Connect session this engine opened is dropped unreleased.

        The server may be gone, and PySpark would retry releasing the session when the process exits.
        """
        from memwal_core.spark_session import executor_error, executor_memwal_error

        if self._opened_remote and self._session is not None:
            self._session.client.close()
            self._session = None
        return executor_memwal_error(exc) or EngineJobError(
            f"{what}: Spark job failed: {executor_error(exc)}"
        )

    def parallelism(self) -> int:
        if self._parallelism is None:
            from memwal_core.spark_session import default_parallelism

            try:
                self._parallelism = default_parallelism(self.session)
            except MemwalError:
                raise
            except Exception as exc:
                raise self._failed("asking Spark for its parallelism", exc) from exc
        return self._parallelism

    def run(
        self, task: Callable[[T], R], items: Sequence[T], *, what: str, waiting: int | None = None
    ) -> list[R]:
        from memwal_core.spark_session import run_tasks

        if not items:
            return []
        try:
            return run_tasks(self.session, task, items, what=what)
        except MemwalError:
            raise
        except Exception as exc:  # a PySpark (classic or Connect) error wrapping the executor's traceback
            raise self._failed(what, exc) from exc


@dataclass(frozen=True)
class SparkThreshold:
    """The smallest round worth Spark: one below both figures runs in this process."""

    min_rows: Amount = DEFAULT_SPARK_MIN_ROWS
    min_bytes: Amount = DEFAULT_SPARK_MIN_BYTES

    def __post_init__(self) -> None:
        check_fields(self)

    def reason(self, rows: int, size: int) -> tuple[bool, str]:
        """Whether a round this big goes to Spark, and why in words."""
        figures = (
            f"{rows:,} rows {{}} spark_min_rows {self.min_rows:,}",
            f"{size / (1 << 20):,.1f} MiB {{}} spark_min_bytes {self.min_bytes / (1 << 20):,.0f} MiB",
        )
        if rows < self.min_rows and size < self.min_bytes:
            return False, " and ".join(f.format("<") for f in figures)
        return True, figures[0].format(">=") if rows >= self.min_rows else figures[1].format(">=")


class SparkWhereItPays(Engine):
    """Spark for the rounds big enough to pay for it, threads of this process for the others.

    Stands for `spark` where a pipeline names the engine of a kind of work
    (`merge_engine: spark`); a service asks `for_round` once it knows a
    round's size. Used without asking (an ingestion), it is the Spark engine.
    """

    name = "spark"
    remote = True

    def __init__(self, spark: SparkEngine, threshold: SparkThreshold | None = None) -> None:
        self.spark = spark
        self.threshold = threshold or SparkThreshold()
        self.local = LocalEngine()

    def for_round(self, rows: int, size: int) -> Chosen:
        pays, reason = self.threshold.reason(rows, size)
        return Chosen(self.spark if pays else self.local, reason)

    def parallelism(self) -> int:
        return self.spark.parallelism()

    def run(
        self, task: Callable[[T], R], items: Sequence[T], *, what: str, waiting: int | None = None
    ) -> list[R]:
        return self.spark.run(task, items, what=what, waiting=waiting)


def engine_named(
    name: str, *, spark_master: str | None = None, spark_remote: str | None = None, verbose: bool = False
) -> Engine:
    """The engine the CLI's `--engine NAME` asks for (`--spark-master` or `--spark-remote` for Spark)."""
    if name == "local":
        return LocalEngine()
    if name == "spark":
        return SparkEngine(master=spark_master, remote=spark_remote, verbose=verbose)
    raise BadInputError(f"unknown engine {name!r} (use {' or '.join(ENGINES)})")
