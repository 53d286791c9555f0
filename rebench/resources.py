"""Where the environment folders and the Dockerfiles are, for every kind of install.

Both live as top-level folders of the repository (`environments/`, `dockerfiles/`), and
a built wheel carries copies of them as package data under `rebench/_bundled/` (made by
the build hook in `setup.py`; environments without their `tests/` and caches). One
lookup, the first that applies wins:

1. an explicit setting: `REBENCH_ENVIRONMENTS` / `REBENCH_DOCKERFILES`, used as given
   (a wrong path is reported, never silently replaced by another folder);
2. the checkout this code runs from (a source tree or an editable install): the folder
   beside `pyproject.toml`, so edits take effect without reinstalling;
3. the copies bundled into the installed package (`pip install .` or a wheel).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED = "_bundled"
"""The package subfolder where a built wheel keeps its copies; `setup.py` writes the same names."""


def _locate(setting: str, folder: str) -> Path:
    override = os.environ.get(setting)
    if override:
        return Path(override)
    checkout = PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / folder).is_dir():
        return checkout / folder
    return PACKAGE_DIR / BUNDLED / folder


def environments_dir() -> Path:
    """The folder of environment folders in force (see the module docstring for the order)."""
    return _locate("REBENCH_ENVIRONMENTS", "environments")


def dockerfiles_dir() -> Path:
    """The folder holding `base-cpu.Dockerfile`, `base-cuda.Dockerfile` and `env.Dockerfile`."""
    return _locate("REBENCH_DOCKERFILES", "dockerfiles")
