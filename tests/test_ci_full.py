"""REBENCH_CI_FULL=1 turns every skip into a failure, so a missing engine cannot turn CI green.

Each case runs pytest in this process (pytester) on a small test file with this repository's
plugin loaded, as the root conftest.py loads it for the real suite."""

from __future__ import annotations

import pytest

SUITE = """
import pytest

def test_runs():
    assert True

def test_needs_an_engine():
    pytest.skip("no Docker engine answers: connection refused")

@pytest.mark.skipif(True, reason="needs the METR data file")
def test_needs_data():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
"""

MISSING_MODULE = """
import pytest

torch = pytest.importorskip("torch_that_is_not_installed")

def test_uses_it():
    assert torch
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_skips_stay_skips_outside_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_suite=SUITE, test_module_skip=MISSING_MODULE)
    for value in (None, "0", ""):
        if value is None:
            monkeypatch.delenv("REBENCH_CI_FULL", raising=False)
        else:
            monkeypatch.setenv("REBENCH_CI_FULL", value)
        result = pytester.runpytest("-p", "tests.ci_full")
        result.assert_outcomes(passed=1, skipped=3, xfailed=1)
        assert result.ret == pytest.ExitCode.OK, value


def test_every_skipped_test_fails_under_ci_full(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBENCH_CI_FULL", "1")
    result = suite.runpytest("-p", "tests.ci_full", "-rfE")
    # A skip in the test body fails the test; a skip mark (decided at setup) is a setup error;
    # an expected failure is not a skip and stays as it was.
    result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "skipped under REBENCH_CI_FULL=1, where every test must run: needs the METR data file",
        "skipped under REBENCH_CI_FULL=1, where every test must run: no Docker engine answers: connection refused",
        "FAILED test_suite.py::test_needs_an_engine - *",
        "ERROR test_suite.py::test_needs_data - *",
    ])


def test_a_skipped_module_stops_the_run_under_ci_full(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytest.importorskip` at module level (PyTorch in the environments' tests) skips at collection."""
    pytester.makepyfile(test_module_skip=MISSING_MODULE)
    monkeypatch.setenv("REBENCH_CI_FULL", "1")
    result = pytester.runpytest("-p", "tests.ci_full")
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["skipped under REBENCH_CI_FULL=1*could not import 'torch_that_is_not_installed'*"])
