"""The `memwal` command line: thin wrappers over memwal_core's services."""
