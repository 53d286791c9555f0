"""Under REBENCH_CI_FULL=1 (set by .ci/run) a skipped test is a failed test.

Docker, PyTorch and data-dependent tests skip cleanly on a developer's machine that lacks
them; in CI the same skip would turn a red run green, so there every skip (of a test, or of
a whole module at collection) is reported as a failure naming the skip's reason. An expected
failure (xfail) is not a skip and is left alone. Loaded for the whole suite by the repository's
root conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

CI_FULL_VAR = "REBENCH_CI_FULL"


def ci_full() -> bool:
    return os.environ.get(CI_FULL_VAR, "") not in ("", "0")


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    report.outcome = "failed"
    report.longrepr = f"skipped under {CI_FULL_VAR}=1, where every test must run: {_skip_reason(report)}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if ci_full() and report.skipped and not hasattr(report, "wasxfail"):
        _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    if ci_full() and report.skipped:
        _fail(report)
    return report
