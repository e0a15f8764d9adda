"""Test support: real servers (SeaweedFS S3, Spark) and independent table readers for tests and benchmarks."""
