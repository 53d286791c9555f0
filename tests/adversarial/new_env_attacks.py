"""Shared pieces of the attacks on the two newer environments (activation_sparsity, high_norm_tokens):
the environments' own `installed` fixture (a real local sandbox scored through the harness's helper),
a probe of what the scored code can read of the scorer, and modules planted under the names the
scorer imports. The tests are test_activation_sparsity_attacks.py and test_high_norm_attacks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rebench.environments.build import local_python
from rebench.kit.buildutil import load_file

REPO = Path(__file__).resolve().parents[2]
ENV_FIXTURES = load_file("rebench_environment_fixtures", REPO / "environments" / "conftest.py")
"""environments/conftest.py: `installed` builds (cached by content hash) and installs an environment
in a local sandbox, and scores through run_scoring and the in-sandbox helper, as an attempt does."""



def install(installed: Any, name: str) -> Any:
    """`installed(name)` with the environment's virtualenv made first (the fixture builds it only
    with the assets, and those may come from a kept build)."""
    local_python(ENV_FIXTURES.environment(name), "tiny")
    return installed(name)


PROBE = '''
import gc, os, sys

SHORT = {{"PermissionError": "denied", "FileNotFoundError": "absent", "IsADirectoryError": "dir"}}


def outcome(action):
    try:
        got = action()
    except Exception as exc:  # what the kernel said, shortened: the report must fit the error message
        return SHORT.get(type(exc).__name__, type(exc).__name__)
    return "READ" if got else "empty"


def read(path):
    with open(path, "rb") as handle:
        return handle.read(64)


def parent_memory():
    parent = os.getppid()
    start = int(open(f"/proc/{{parent}}/maps").readline().split("-")[0], 16)
    with open(f"/proc/{{parent}}/mem", "rb") as memory:
        memory.seek(start)
        return memory.read(16)


def parent_params():
    """The scorer's command line names its params file (argv is public): read that file."""
    argv = open(f"/proc/{{os.getppid()}}/cmdline", "rb").read().split(b"\\0")
    if b"--params" not in argv:
        return b""
    return read(argv[argv.index(b"--params") + 1].decode())


def scorer_modules():
    """Objects of the scorer (its modules, its ctx) in this process: there are none to find."""
    names = [n for n in sys.modules if n in ("rebench_score", "high_norm_tokens_measure",
                                             "activation_sparsity_sparse_gpt")]
    held = [o for o in gc.get_objects() if isinstance(o, dict) and "confine_command" in o and "solution" in o]
    return names + held


def probe():
    protected = {protected!r}
    checks = {{name: (lambda p=os.path.join(protected, name): read(p)) for name in {files!r}}}
    checks.update({{
        "ls": lambda: os.listdir(protected),
        "source": lambda: read(os.path.join(protected, "scoring", "score.py")),
        "environ": lambda: read(f"/proc/{{os.getppid()}}/environ"),
        "mem": parent_memory,
        "fds": lambda: os.listdir(f"/proc/{{os.getppid()}}/fd"),
        "argv-params": parent_params,
        "objects": scorer_modules,
        "env": lambda: [k for k in os.environ if "NONCE" in k.upper() or "TOKEN" in k.upper()],
    }})
    return "probe: " + " ".join(f"{{name}}={{outcome(check)}}" for name, check in checks.items())
'''
"""Source defining `probe()`: what the scored code reaches of the scorer (files of the protected
folder, the scorer's /proc entries, scorer state in its own interpreter), one word each."""


def probe_source(protected: Path, files: list[str]) -> str:
    return PROBE.format(protected=str(protected), files=files)


def probe_report(result: dict[str, Any]) -> dict[str, str]:
    """{probe name: outcome} from a score result whose error message carries the probe's report."""
    error = str(result["message"].get("error", ""))
    assert "probe: " in error, result
    words = error.split("probe: ", 1)[1].split("\n", 1)[0].split()
    return dict(word.split("=", 1) for word in words if "=" in word)


def unconfined_params(protected: Path) -> str:
    """A params file in the protected folder that runs the scored code without the helper's
    confinement (the control: it shows what the probe reaches where confinement is missing)."""
    params = json.loads((protected / "params.json").read_text())
    (protected / "params-unconfined.json").write_text(json.dumps({**params, "confine_command": []}))
    return "params-unconfined.json"


PLANTED = '''
import os as _os
import sys as _sys

try:
    with open(_os.path.join({markers!r}, "{name}-%d" % _os.getpid()), "w") as _marker:
        _marker.write(" ".join(_sys.argv)[:300])
except OSError:
    pass
'''


def plant_modules(folders: list[Path], markers: Path, names: list[str]) -> list[Path]:
    """Under each folder, a module for each name the scorer imports (a dotted name becomes a
    package) and a .pth file; each, when run by any process that may write `markers`, leaves a
    file there naming itself and the process's argv. Returns the planted files."""
    planted: list[Path] = []
    for folder in folders:
        for name in names:
            parts = name.split(".")
            target = folder.joinpath(*parts[:-1], f"{parts[-1]}.py")
            for depth in range(1, len(parts)):
                package = folder.joinpath(*parts[:depth], "__init__.py")
                package.parent.mkdir(parents=True, exist_ok=True)
                package.write_text(PLANTED.format(markers=str(markers), name=".".join(parts[:depth])))
                planted.append(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(PLANTED.format(markers=str(markers), name=name))
            planted.append(target)
        pth = folder / "zz_rebench_attack.pth"
        pth.write_text(f"import os; open(os.path.join({str(markers)!r}, 'pth-' + str(os.getpid())), 'w').close()\n")
        planted.append(pth)
    return planted
