"""Garbage collection: delete merged generations, WAL entries and old region manifests once provably unneeded."""
