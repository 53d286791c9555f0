"""The trusted files of a sandbox's protected harness folder: the scoring helper and the environment kit.

Both backends lay out the same tree, root-owned and read-only to the agent (Docker images
at /opt/rebench/, the local backend at ROOT/rebench/):

    score_helper.py        what every score call runs (stdlib only)
    rebench/__init__.py    a stub: `import rebench.kit` there needs nothing else of rebench
    rebench/kit/*.py       the environment kit (rebench/kit/__init__.py says what is in it)

The helper runs as a script, so its folder is on the scoring program's sys.path ahead of
site-packages, and the scorer imports this copy of the kit, never one the agent could have
placed. Builds on the host get the same tree on PYTHONPATH (`harness_folder`). The kit's
version, a hash of its files, is part of every environment's content hash, so changing the
kit rebuilds assets and images.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from rebench.paths import cache_dir

HELPER = Path(__file__).resolve().parent / "scoring" / "score_helper.py"
KIT = Path(__file__).resolve().parent / "kit"
_STUB = b'"""The part of rebench that a sandbox holds: the environment kit (rebench/kit)."""\n'


def kit_files() -> dict[str, bytes]:
    """The kit's modules by their path in the harness folder."""
    return {f"rebench/kit/{path.name}": path.read_bytes() for path in sorted(KIT.glob("*.py"))}


def kit_version() -> str:
    """A hash of the kit's files: what an environment's build and scorer import."""
    digest = hashlib.sha256()
    for name, data in kit_files().items():
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:16]


def harness_files() -> dict[str, bytes]:
    """Every file of the harness folder by its relative path."""
    return {"score_helper.py": HELPER.read_bytes(), "rebench/__init__.py": _STUB, **kit_files()}


def install_harness(folder: Path) -> None:
    """Write the harness folder's files under `folder`, read-only (the Docker image also makes
    them root's; the local backend cannot, see rebench/sandbox/local.py)."""
    for name, data in harness_files().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o444)


def harness_folder() -> Path:
    """A harness folder on this machine for this kit version (cached), for builds to import the kit from."""
    target = cache_dir() / "harness" / kit_version()
    if (target / "rebench" / "kit").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".install-"))
    install_harness(scratch / "tree")
    try:
        (scratch / "tree").rename(target)
    except OSError:  # another process installed the same version first
        if not (target / "rebench" / "kit").is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
