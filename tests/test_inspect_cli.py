"""`rebench export inspect` and `rebench view` without Inspect installed, and the viewer's bind rule.

Inspect's absence is real for the process: its modules are made unimportable before rebench loads
(as on an install without the `inspect` extra, which .ci/run also checks on a wheel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_main

WITHOUT_INSPECT = (
    "import sys\n"
    "sys.modules.update({'inspect_ai': None, 'inspect_ai.log': None})\n"
    "from rebench.cli.app import main\n"
    "main(sys.argv[1:])\n"
)


@pytest.mark.parametrize("command", [["export", "inspect", "--out", "logs"], ["view"]])
def test_without_the_extra_one_line_says_how_to_install_it(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "r.db"
    done = subprocess.run([sys.executable, "-c", WITHOUT_INSPECT, *command, "--db", str(db)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'rebench[inspect]'" in lines[0], done.stderr
    assert not db.exists() and not (tmp_path / "logs").exists(), "nothing is written"


def test_the_viewer_binds_beyond_loopback_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    code, _, err = run_main(["view", "--host", "0.0.0.0", "--db", str(db)], capsys)
    assert code == 2 and "--host '0.0.0.0' is not a loopback address" in err and "--allow-remote" in err
    assert len(err.strip().splitlines()) == 1 and not db.exists()
