"""Ingestion: files into a MemWAL table through the writer, locally or on Spark."""
