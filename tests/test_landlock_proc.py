"""What the Landlock launcher (`score_helper.py --confined`, rebench/kit/landlock.py) lets the
scored code do in /proc. CUDA's driver truncates a /proc file when it starts: without that right
every GPU solution failed to score under confinement on an H200 (cudaGetDeviceCount, error 304;
docs/gpu-validation.md). Writing outside the scratch and reading the denied folder stay refused.
Real kernel, real launcher; skipped only where the kernel has no Landlock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebench.kit.landlock import confinement_unavailable
from rebench.scoring.score_helper import confine_command

pytestmark = pytest.mark.skipif(confinement_unavailable() is not None,
                                reason=f"no Landlock here: {confinement_unavailable()}")

PROBE = """import sys
def attempt(what, action):
    try:
        action()
        print(what, "ok")
    except OSError as exc:
        print(what, type(exc).__name__)
def truncate_proc():
    with open("/proc/self/comm", "w") as handle:  # "w" opens with O_TRUNC
        handle.write("confined")
def write_outside():
    with open(sys.argv[1] + "/outside.txt", "w") as handle:
        handle.write("held-out")
def read_denied():
    open(sys.argv[2] + "/secret.txt").read()
attempt("proc", truncate_proc)
attempt("outside", write_outside)
attempt("denied", read_denied)
"""


def test_the_confined_code_may_truncate_proc_files_and_nothing_more(tmp_path: Path) -> None:
    protected, outside = tmp_path / "protected", tmp_path / "outside"
    protected.mkdir()
    outside.mkdir()
    (protected / "secret.txt").write_text("held-out")
    command = [*confine_command(str(protected)), sys.executable, "-c", PROBE, str(outside), str(protected)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("rebench-confine: active"), done.stderr
    assert done.stdout.split("\n")[:3] == ["proc ok", "outside PermissionError", "denied PermissionError"], done.stdout
    assert not (outside / "outside.txt").exists()
