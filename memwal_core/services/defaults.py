"""Defaults and choices of the services' options: constants only, importing nothing.

The CLI builds its parser (`--help`, `--version`, a usage error) from these
without loading the services, Lance or Arrow; each service imports the ones it
checks against from here.
"""

from __future__ import annotations

# compact: rows per fragment to aim at, the deleted share that makes a fragment worth rewriting,
# and rewrite tasks per run.
DEFAULT_TARGET_ROWS = 1024 * 1024
DEFAULT_DELETION_THRESHOLD = 0.1
DEFAULT_MAX_TASKS = 64

# merge: how each batch commits (see services/merge/commit.py).
AUTO, SINGLE, TWO_STEP = "auto", "single", "two-step"
COMMIT_FORMS = (AUTO, SINGLE, TWO_STEP)

# snapshot: regions stored inline in the index details, beyond which the snapshot gets its own file.
DEFAULT_INLINE_THRESHOLD = 100

# A durable put waits for the next WAL flush, holding its caller (and the region it claimed) that
# long: an interval over a minute is a mistake, not a setting.
MAX_WAL_FLUSH_INTERVAL_MS = 60_000

# gc: how long a pruned generation's directory stays (a reader may still have it open).
DEFAULT_GRACE_SECONDS = 3600.0
# How long WAL entries and region manifest versions are kept: far beyond any pause a live process
# survives (Delta's VACUUM keeps a week too). Never the grace period, which only has to outlast a reader.
DEFAULT_FENCE_RETENTION_SECONDS = 7 * 86400.0
# A fence retention under a day would expose a writer paused for an ordinary outage.
MIN_FENCE_RETENTION_SECONDS = 86400.0
# A grace period longer than ten years is a typo, not a policy.
MAX_GRACE_SECONDS = 10 * 365 * 86400.0

# The merge lag (age of the oldest pending generation) above which a table is behind: the default of
# the pipeline's asset check, its FreshnessPolicy and the exporter's alert threshold alike.
DEFAULT_MAX_PENDING_AGE_SECONDS = 900.0
# metrics: seconds a reading is served before the tables are read again (Prometheus's usual scrape interval).
DEFAULT_READ_INTERVAL = 15.0
# metrics: seconds a read may run before its table counts as down: room for one request that times out
# (15 s by default) and its retry, well short of the 5 minutes MemwalTableUnreadable waits.
DEFAULT_READ_TIMEOUT = 30.0

# Where a service's tasks run.
ENGINES = ("local", "spark")
# The smallest round Spark runs by default: below both, Spark's fixed costs outweigh what it adds
# (the crossover measured by bench/spark.py, docs/spark.md).
DEFAULT_SPARK_MIN_ROWS = 500_000
DEFAULT_SPARK_MIN_BYTES = 256 << 20
