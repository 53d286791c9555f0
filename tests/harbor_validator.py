"""Harbor's own ATIF validator (`python -m harbor.utils.trajectory_validator FILE`), run from a side
virtualenv the tests make once and keep in pytest's cache folder.

Harbor (PyPI `harbor`) declares Python >= 3.12 and is not among the project's dependencies (a plain
`pip install harbor` fails on 3.11, the project's Python). Its trajectory models and validator need
only pydantic, and run on 3.11 (../shared/reference/harness-landscape.md, section 6): the side venv is
made with this interpreter's `venv`, then `pip install --no-deps --ignore-requires-python harbor==PIN`
and pydantic, from PyPI (or the machine's pip configuration, as CI's own installs). A machine that
cannot reach the package index skips the tests that need it, saying why; CI fails on a skip
(REBENCH_CI_FULL=1), so there it must install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
from filelock import FileLock

HARBOR = "harbor==0.25.0"
"""The version read here: its models accept ATIF-v1.0 to v1.8; the export writes v1.7."""


DEFAULT_CACHE = Path(__file__).resolve().parents[1] / ".pytest_cache" / "d" / "harbor"
"""pytest's cache folder of the checkout (`config.cache.mkdir("harbor")`), for callers without `request`."""


def harbor_python(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The side venv's python, made on first use (a lock keeps parallel test workers to one maker)."""
    venv = cache_dir / f"harbor-venv-{HARBOR.split('==')[1]}-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache_dir / "harbor-venv.lock")):
        if ready.exists():
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
        steps = [["--no-deps", "--ignore-requires-python", HARBOR], [f"pydantic=={pydantic.VERSION}"]]
        for args in steps:
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                pytest.skip(f"Harbor's validator needs a side venv with {' '.join(args)} from the package index, "
                            f"which failed here: {last}")
        ready.write_text(HARBOR + "\n")
    return python


def validate(python: Path, path: Path) -> tuple[bool, str]:
    """Harbor's validator on one file: (accepted, what it printed)."""
    done = subprocess.run([str(python), "-m", "harbor.utils.trajectory_validator", str(path)], capture_output=True,
                          text=True, timeout=120)
    return done.returncode == 0, done.stdout + done.stderr


def load_with_harbor(python: Path, path: Path) -> str:
    """The file read by Harbor's Trajectory model and dumped back as JSON (what Harbor's tools see)."""
    code = ("import json, sys\nfrom harbor.models.trajectories import Trajectory\n"
            "t = Trajectory.model_validate_json(open(sys.argv[1], encoding='utf-8').read())\n"
            "sys.stdout.write(json.dumps(t.to_json_dict(), ensure_ascii=True))\n")
    done = subprocess.run([str(python), "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout
