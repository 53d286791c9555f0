"""Run by an environment's virtualenv python: `python requirements_check.py REQUIREMENTS.txt`.

Exits 0 when every requirement in the file, and every dependency of theirs down the tree, is
already installed where that interpreter looks, at a version the specifier allows; 1 otherwise,
or when a line is anything but a plain requirement (an option, a URL, a local path), which pip
then handles. Most environments pin what the harness already has (its PyTorch, NumPy), so
building their virtualenv mostly finds everything in place: this check takes about 0.1 CPU-s
where a pip run that installs nothing takes about 3 (rebench.environments.build).

Standard library and `packaging` only: it runs outside the harness, in the environment's Python.
"""

from __future__ import annotations

import sys
from importlib import metadata

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pragma: no cover - pip decides, as before
    sys.exit(1)


def _installed(requirement: Requirement, seen: set[tuple[str, frozenset[str]]]) -> bool:
    """The requirement, with its extras and what they pull in, is installed at an allowed version.
    Every requirement's specifier is checked, even for a package met before (two lines, or a
    dependency's pin, may ask different versions of it); only its dependencies are walked once."""
    try:
        dist = metadata.distribution(requirement.name)
    except metadata.PackageNotFoundError:
        return False
    if not requirement.specifier.contains(dist.version, prereleases=True):
        return False
    extras = frozenset(requirement.extras)
    key = (canonicalize_name(requirement.name), extras)
    if key in seen:
        return True
    seen.add(key)
    for line in dist.requires or []:
        try:
            needed = Requirement(line)
        except InvalidRequirement:
            return False
        if needed.marker is not None and not any(needed.marker.evaluate({"extra": extra})
                                                 for extra in ("", *extras)):
            continue
        if not _installed(needed, seen):
            return False
    return True


def all_installed(lines: list[str]) -> bool:
    seen: set[tuple[str, frozenset[str]]] = set()
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-") or "://" in line or "@" in line or "/" in line:
            return False
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            return False
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if not _installed(requirement, seen):
            return False
    return True


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        sys.exit(0 if all_installed(handle.read().splitlines()) else 1)
