"""/dev/shm during scoring (issue 24): the submitted code may write there (POSIX semaphores and
shared memory live nowhere else), so the agent could leave a world-writable file or folder there
for it to fill with what it was shown, and read it after the call. The agent's entries are
closed to other users while it is frozen, and what the scoring users made is removed before it
resumes. Real Docker engine, base image; the submitted code runs as `subject` through the
confined launcher, as every scorer runs it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, with_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker]

FILL = ("for target in /dev/shm/drop.txt /dev/shm/box/inner.txt /dev/shm/left-by-subject.txt; do "
        "echo held-out > $target 2>/dev/null && echo wrote $target; done; true")


def test_the_scored_code_cannot_fill_what_the_agent_left_in_shared_memory() -> None:
    async def body(sb: Any) -> tuple[Any, Any]:
        laid = await sb.exec("touch /dev/shm/drop.txt && chmod 666 /dev/shm/drop.txt"
                             " && mkdir /dev/shm/box && chmod 777 /dev/shm/box")
        assert laid.ok, laid.stderr
        scored = await sb.exec(
            ["python3", sb.paths.helper, "--confined", "--user", "subject", "--deny", "/protected", "--",
             "sh", "-c", FILL], user="scorer", cwd="/", timeout=60)
        after = await sb.exec("cat /dev/shm/drop.txt; ls -A /dev/shm/box; ls /dev/shm")
        return scored, after

    scored, after = with_sandbox(base_image(docker_engine()), body)
    assert scored.exit_code == 0, scored.stderr
    # only its own new file: the agent's were closed to it
    assert scored.stdout.split() == ["wrote", "/dev/shm/left-by-subject.txt"], scored.stdout
    assert "held-out" not in after.stdout and "inner.txt" not in after.stdout
    assert "left-by-subject.txt" not in after.stdout  # and that one is gone before the agent runs
