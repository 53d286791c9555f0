"""Two processes building the same environment at once: the second waits and reuses the first's build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BUILD_PY = '''
import argparse, os, time
from pathlib import Path
parser = argparse.ArgumentParser()
parser.add_argument("--profile"); parser.add_argument("--out")
args = parser.parse_args()
with open(os.environ["BUILD_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
time.sleep(2)  # long enough for the second process to arrive while this one builds
(Path(args.out) / "home").mkdir()
(Path(args.out) / "home" / "built.txt").write_text(str(os.getpid()))
'''


def test_concurrent_builds_of_one_environment_build_once(fixture_envs: Path, tmp_path: Path) -> None:
    """Without a lock both processes build, and the later rename of one over the other's folder (or the
    virtualenv's .pth written twice) can fail one of them; with it, exactly one build runs, both succeed."""
    (fixture_envs / "counter" / "build.py").write_text(BUILD_PY)
    log = tmp_path / "builds.log"
    env = {**os.environ, "REBENCH_CACHE": str(tmp_path / "cache"), "BUILD_LOG": str(log),
           "REBENCH_ENVIRONMENTS": str(fixture_envs)}
    argv = [sys.executable, "-m", "rebench.cli.app", "envs", "build", "counter", "--profile", "tiny",
            "--backend", "local"]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, out + err
    assert len(log.read_text().split()) == 1, "the environment's build.py ran more than once"
    built = list((tmp_path / "cache" / "assets" / "counter").glob("tiny-*/home/built.txt"))
    assert len(built) == 1
    assert len(list((tmp_path / "cache" / "venvs").glob("counter-*/.complete"))) == 1
