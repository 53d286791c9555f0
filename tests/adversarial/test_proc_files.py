"""/proc during scoring: the confined launcher lets the scored code write and truncate /proc files
(CUDA's driver truncates one when it starts; docs/gpu-validation.md). The attack: the scored code
encodes what it was shown in /proc files the agent reads back after the call: the settings of a
process the agent left running (`coredump_filter`, 9 bits; `oom_score_adj`, which a process's own
uid may raise), or the container's host and domain names. The scoring user is not the agent, so
the kernel refuses the first two, and /proc/sys is read-only in the container. As a control, the
same code confined as the agent's own uid does write the process's settings, so the probe sees
the attack work where the identities are not kept apart. Real Docker engine, base image."""

from __future__ import annotations

from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, with_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker]

FILL = ("printf 0x1b5 > /proc/$VICTIM/coredump_filter 2>/dev/null && echo wrote coredump_filter; "
        "printf 777 > /proc/$VICTIM/oom_score_adj 2>/dev/null && echo wrote oom_score_adj; "
        "for name in hostname domainname; do "
        "printf held-out > /proc/sys/kernel/$name 2>/dev/null && echo wrote $name; done; true")
READ_BACK = ("cat /proc/$VICTIM/coredump_filter /proc/$VICTIM/oom_score_adj; hostname; "
             "cat /proc/sys/kernel/domainname")


def test_the_scored_code_cannot_leave_what_it_saw_in_proc_files() -> None:
    async def body(sb: Any) -> tuple[Any, Any, Any]:
        left = await sb.exec(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!"], cwd="/")
        assert left.ok, left.stderr
        victim = left.stdout.strip()

        async def fill(as_user: list[str]) -> Any:
            return await sb.exec(
                ["python3", sb.paths.helper, "--confined", *as_user, "--deny", "/protected", "--",
                 "sh", "-c", FILL], user="scorer", cwd="/", timeout=60, env={"VICTIM": victim})

        scored = await fill(["--user", "subject"])
        after = await sb.exec(["sh", "-c", READ_BACK], cwd="/", env={"VICTIM": victim})
        control = await sb.exec(
            ["python3", sb.paths.helper, "--confined", "--deny", "/protected", "--", "sh", "-c", FILL],
            cwd="/", timeout=60, env={"VICTIM": victim})
        return scored, after, control

    scored, after, control = with_sandbox(base_image(docker_engine()), body)
    assert scored.exit_code == 0 and "rebench-confine: active" in scored.stderr, scored.stderr
    assert "wrote" not in scored.stdout, scored.stdout
    assert after.exit_code == 0, after.stderr
    values = after.stdout.split()
    assert values[0] != "000001b5" and values[1] != "777" and "held-out" not in values[2:], values
    # the control: confined as the agent itself, its own process's settings can be written
    assert control.exit_code == 0 and "rebench-confine: active" in control.stderr, control.stderr
    assert control.stdout.split("\n")[:2] == ["wrote coredump_filter", "wrote oom_score_adj"], control.stdout
