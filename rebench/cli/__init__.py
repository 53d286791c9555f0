"""The `rebench` command line."""
