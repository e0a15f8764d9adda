"""Object stores: local files and S3 behind one interface."""
