"""Build hook: a built package carries the environments and Dockerfiles as package data.

They stay top-level folders of the repository (`environments/`, `dockerfiles/`); building
a wheel (`pip install .`, `pip wheel .`) copies them into `rebench/_bundled/`, where
`rebench.resources` finds them when no checkout is around. Only folders with an
`environment.toml` are environments; their `tests/` and caches stay behind (the content
hash skips them too, so a bundled copy hashes like the checkout and shares its cached
assets and images). Editable installs copy nothing: they read the checkout.
All other metadata is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("rebench", "_bundled")  # rebench.resources.BUNDLED
SKIP = shutil.ignore_patterns("tests", "__pycache__", ".pytest_cache", "*.pyc")


class BuildPyWithData(build_py):
    """`build_py` that also lays the environments and Dockerfiles into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib, *BUNDLED)
        shutil.rmtree(target, ignore_errors=True)  # no leftovers from an earlier build in build/
        environments = sorted(p for p in (ROOT / "environments").glob("*/environment.toml"))
        dockerfiles = sorted((ROOT / "dockerfiles").glob("*.Dockerfile"))
        if not environments or not dockerfiles:
            raise SystemExit(f"{ROOT}: environments/*/environment.toml or dockerfiles/*.Dockerfile missing; "
                             "build from a checkout or a complete sdist")
        for metadata in environments:
            shutil.copytree(metadata.parent, target / "environments" / metadata.parent.name, ignore=SKIP)
        (target / "dockerfiles").mkdir(parents=True)
        for dockerfile in dockerfiles:
            shutil.copy2(dockerfile, target / "dockerfiles" / dockerfile.name)


setup(cmdclass={"build_py": BuildPyWithData})
