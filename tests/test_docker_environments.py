"""The three model environments in Docker: an agent cannot read their held-out data or the
Scaling Law ground-truth sweep, nor find a readable copy of them anywhere in its container.
Each test builds the environment's tiny image and runs an adversarial `replay` attempt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from .conftest import run_cli
from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HELD_OUT = {
    "fix_embedding": ["val.bin"],
    "restricted_mlm": ["heldout.bin"],
    "small_scaling_law": ["sweep_tiny.json", "sweep_paper.json"],
}


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_files_are_unreadable(name: str, tmp_path: Path) -> None:
    base_image(docker_engine())
    built = run_cli("envs", "build", name, "--profile", "tiny", "--backend", "docker", timeout=1200)
    assert built.returncode == 0, built.stderr
    probes = []
    for filename in HELD_OUT[name]:
        probes += [
            f"echo '## {filename}'",
            f"wc -c /protected/{filename}",
            f"wc -c /opt/rebench/env/protected/{filename}",
            f"find / -xdev -name {filename} -readable -print 2>/dev/null | sed 's/^/READABLE /'",
        ]
    probe = "{ ls /protected; " + "; ".join(probes) + "; } > probe.txt 2>&1; true"
    script = tmp_path / "probe.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": probe}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    result = run_cli("run", "--env", name, "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "tiny", "--budget", "5m", "--backend", "docker", "--db", str(db), timeout=900)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        (status, snapshot), = connection.execute("select status, snapshot_path from attempts").fetchall()
    assert status == "done"
    seen = (Path(snapshot) / "probe.txt").read_text()
    assert "READABLE" not in seen, seen
    denied = seen.count("Permission denied")
    assert denied >= 1 + len(HELD_OUT[name]), seen  # ls /protected and each wc -c /protected/FILE
    for filename in HELD_OUT[name]:
        assert f"/protected/{filename}\n" not in seen.replace("wc: ", ""), seen
