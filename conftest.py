"""Suite-wide pytest plugins for tests/ and environments/ alike (a conftest.py below the root
would reach only its own folder): skips fail under REBENCH_CI_FULL=1 (tests/ci_full.py)."""

pytest_plugins = ["tests.ci_full", "pytester"]
