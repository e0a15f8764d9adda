"""memwal_pipelines: the Dagster code location that runs memwal's services."""
