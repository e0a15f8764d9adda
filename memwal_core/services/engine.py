"""Engines: where the independent tasks of a merge, a compaction or an ingestion run.

Each of those services cuts its work into tasks that need nothing from one
another (the collapse units of a merge batch, Lance's rewrite tasks, the
files and then the regions of an ingestion) and hands them to one engine.
`local` runs them on threads of this process, with no JVM. `spark` runs one
Spark task per item on executors, which are other processes, perhaps on
other hosts: it is `remote`, so whatever a task produces beyond a small
result must go through the table's storage, never through memory.

Either way a task's `MemwalError` comes back as itself (bad input found on an
executor still exits 2), and any other failure as one `EngineJobError`
naming the job, so callers handle one shape of failure whatever ran it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar, TypeVar

from memwal_core.arguments import Count, checked
from memwal_core.errors import BadInputError, EngineJobError, MemwalError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

# Tasks at once in one process: Lance's reads and rewrites and pandas release the GIL for most of theirs.
DEFAULT_THREADS = 8
ENGINES = ("local", "spark")


class Engine(ABC):
    """Runs a service's tasks; `remote` engines run them in other processes."""

    name: ClassVar[str]
    remote: ClassVar[bool]

    @abstractmethod
    def parallelism(self) -> int:
        """How many tasks run at once: what a service sizes its cuts by."""

    @abstractmethod
    def run(self, task: Callable[[T], R], items: Sequence[T], *, what: str) -> list[R]:
        """`task(item)` for every item, the results in item order; `what` names the job in errors."""


class LocalEngine(Engine):
    """Threads of this process: the baseline, and the engine for work one machine holds."""

    name = "local"
    remote = False

    @checked
    def __init__(self, threads: Count | None = None) -> None:
        self.threads = threads or DEFAULT_THREADS

    def parallelism(self) -> int:
        return self.threads

    def run(self, task: Callable[[T], R], items: Sequence[T], *, what: str) -> list[R]:
        if not items:
            return []
        try:
            with ThreadPoolExecutor(min(self.threads, len(items))) as pool:
                return list(pool.map(task, items))
        except MemwalError:
            raise
        except Exception as exc:
            raise EngineJobError(f"{what}: a task failed: {first_line(exc)}") from exc


class SparkEngine(Engine):
    """One Spark task per item, on the injected session or one started on first use.

    The session is injected where a caller owns it (a Dagster run, a test's
    shared session); otherwise `spark_session(master)` starts one (or reuses
    the active one) only when a job first needs it, so building the engine
    costs nothing. Tasks import pylance on the executor, inside their code.
    """

    name = "spark"
    remote = True

    def __init__(self, session: SparkSession | None = None, *, master: str | None = None) -> None:
        self._session = session
        self._master = master

    @property
    def session(self) -> SparkSession:
        if self._session is None:
            from memwal_core.spark_session import spark_session

            self._session = spark_session(self._master)
        return self._session

    def parallelism(self) -> int:
        return max(1, int(self.session.sparkContext.defaultParallelism))

    def run(self, task: Callable[[T], R], items: Sequence[T], *, what: str) -> list[R]:
        from memwal_core.spark_session import executor_error, executor_memwal_error

        if not items:
            return []
        context = self.session.sparkContext
        context.setJobDescription(f"memwal {what}")
        try:
            # As many slices as items: parallelize slices a list evenly, one item per task here.
            return list(context.parallelize(list(items), len(items)).map(task).collect())
        except Exception as exc:  # a Py4J/PySpark error wrapping the executor's traceback
            raise executor_memwal_error(exc) or EngineJobError(
                f"{what}: Spark job failed: {executor_error(exc)}"
            ) from exc


def engine_named(name: str, *, spark_master: str | None = None) -> Engine:
    """The engine the CLI's `--engine NAME` asks for (`--spark-master` for Spark)."""
    if name == "local":
        return LocalEngine()
    if name == "spark":
        return SparkEngine(master=spark_master)
    raise BadInputError(f"unknown engine {name!r} (use {' or '.join(ENGINES)})")
