"""The `delta-release` command line."""
