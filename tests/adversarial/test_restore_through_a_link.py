"""Re-scoring restores a snapshot into the solution folder as root. The agent owns the folder
above it, so it can leave `solution` as a symbolic link to /etc: root must not empty or fill
/etc through it. Real Docker engine, base image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, with_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker]


def test_a_solution_link_to_etc_is_replaced_not_followed(tmp_path: Path) -> None:
    from rebench.scoring.rescore import restore_snapshot

    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "ld.so.preload").write_text("/home/agent/evil.so\n")

    async def body(sb: Any) -> tuple[str | None, Any, Any]:
        made = await sb.exec(f"rm -rf {sb.paths.solution} && ln -s /etc {sb.paths.solution}", cwd="/home/agent")
        assert made.ok, made.stderr
        error = await restore_snapshot(sb, snapshot)
        etc = await sb.exec(["sh", "-c", "ls /etc/ld.so.preload; test -s /etc/hostname && echo kept"], user="root")
        folder = await sb.exec(["stat", "-c", "%F %U", sb.paths.solution, f"{sb.paths.solution}/ld.so.preload"],
                               user="root")
        return error, etc, folder

    error, etc, folder = with_sandbox(base_image(docker_engine()), body)
    assert error is None
    assert "No such file" in etc.stderr and etc.stdout.strip() == "kept"
    assert folder.stdout.split("\n")[:2] == ["directory agent", "regular file agent"], folder.stdout
