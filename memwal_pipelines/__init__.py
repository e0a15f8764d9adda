"""memwal_pipelines: the Dagster code location that runs memwal's services."""

from pathlib import Path

# The Dagster instance settings (queued runs, concurrency pools, retries) a DAGSTER_HOME should hold.
# Kept inside the package, not in the project root: `dagster dev` and `dg dev` warn that a
# dagster.yaml in the folder they run from "will not be used" unless that folder is DAGSTER_HOME.
INSTANCE_CONFIG = Path(__file__).with_name("dagster.yaml")
