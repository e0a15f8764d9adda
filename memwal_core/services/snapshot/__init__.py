"""The MemWAL index region snapshot: plan (read regions), build, commit under the details lease."""
