"""Separate identities on the Docker backend, with the freeze left out: even an agent process
that runs beside a score call cannot read, trace or signal the scorer, and the submitted code
the scorer runs (as `subject`) can signal or read neither the scorer nor the agent."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, run, started_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]

PAYLOADS = Path(__file__).parent / "payloads"
SUBJECT_PROBE = """
import os
found = []
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) not in (1, os.getpid()):
        try:
            uid = os.stat("/proc/" + entry).st_uid
        except OSError:
            continue
        try:
            os.kill(int(entry), 0)
            found.append(f"SIGNAL {entry} (uid {uid})")
        except OSError:
            pass
        try:
            open(f"/proc/{entry}/environ", "rb").read()
            found.append(f"READ {entry} (uid {uid})")
        except OSError:
            pass
print({"ids": list(os.getresuid()), "groups": os.getgroups(), "found": found})
"""
PROGRAM = f'''import ast, subprocess, sys, time

def score(ctx):
    time.sleep(1.5)  # long enough for the agent's reader to look at every process
    child = subprocess.run([*ctx["confine_command"], sys.executable, "-c", {SUBJECT_PROBE!r}],
                           capture_output=True, text=True, timeout=30)
    time.sleep(1.5)
    return {{"raw": 1.0, "message": {{"subject": ast.literal_eval(child.stdout.strip().splitlines()[-1]),
                                    "first_line": child.stderr.splitlines()[:1]}}}}
'''


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


def test_without_the_freeze_neither_the_agent_nor_the_subject_reaches_the_scorer(image: str) -> None:
    from rebench.sandbox.docker.commands import _SCORER_REQUEST, _USERS

    account, groups = _USERS["scorer"]

    async def body(sb: Any) -> tuple[dict[str, Any], str, Any]:
        await sb.write_file("/protected/probe/score.py", PROGRAM.encode(), user="root")
        await sb.write_file("/protected/probe/params.json",
                            json.dumps({"protected": "/protected", "solution": sb.paths.solution}).encode(),
                            user="root")
        for name in ("common.py", "procread.py"):
            await sb.write_file(name, (PAYLOADS / name).read_bytes())
        started = await sb.exec("setsid nohup python3 procread.py 6 >/dev/null 2>&1 < /dev/null & sleep 0.3")
        assert started.ok, started.stderr
        # The scorer's own request, less the freeze: what the identities hold by themselves.
        request = {key: value for key, value in _SCORER_REQUEST.items() if key != "frozen_users"}
        reply = await sb._channel.request({
            "op": "exec", "user": account, "groups": groups, "cwd": sb.paths.home, "timeout": 60,
            "limit": 100_000, "reap_groups": groups, "env": {"REBENCH_SUBJECT_USER": "subject"},
            "argv": ["python3", sb.paths.helper, "--program", "/protected/probe/score.py",
                     "--params", "/protected/probe/params.json", "--out", "/protected/results/probe.json"],
            **request,
        })
        assert reply["exit_code"] == 0, (reply, base64.b64decode(reply["stderr"]["head"]))
        result = json.loads(await sb.read_file("/protected/results/probe.json"))
        for _ in range(100):
            log = (await sb.read_file("attack.log")).decode()
            if "done," in log:
                break
            await asyncio.sleep(0.1)
        return result, log, await sb.exec("ls procdump")

    async def go() -> tuple[dict[str, Any], str, Any]:
        async with started_sandbox(image) as sb:
            return await body(sb)

    result, log, dumped = run(go())
    subject = result["message"]["subject"]
    assert result["message"]["first_line"] == ["rebench-confine: active"]
    assert subject["ids"] == [1003, 1003, 1003] and subject["groups"] == []
    assert subject["found"] == []  # no process of the scorer or the agent can be signalled or read
    seen = int(log.rsplit("done, ", 1)[1].split()[0])
    assert seen >= 3, log  # the helper, its worker and the subject were all there to try
    assert "READ" not in log and "SIGNAL" not in log, log
    assert dumped.stdout.strip() == ""


def test_the_freeze_holds_through_a_timed_out_score_call_and_is_undone(image: str) -> None:
    """A score call that times out still resumes the agent. While it runs, the agent's
    double-forked job makes no progress, a job that forks without pause is caught whole
    (every process stopped, no new one), and the agent gets no new command."""
    # written aside and renamed: a freeze between the truncation and the write would leave it empty
    ticker = "while :; do date +%s%N > /tmp/tick.new; mv /tmp/tick.new /tmp/tick; sleep 0.05; done"
    forker = "while :; do ( sleep 0.3 & ) ; sleep 0.01; done"
    # zombies (a subshell that exited just before the freeze, its parent now stopped) run nothing: left out
    live = "ps -o pid=,stat= -u agent | awk '$2 !~ /^Z/'"
    watch = (f"cat /tmp/tick; {live} | awk '{{print $1}}' | sort > /tmp/p1; {live} | awk '{{print substr($2, 1, 1)}}'"
             f" | sort -u; sleep 1; cat /tmp/tick; {live} | awk '{{print $1}}' | sort | diff - /tmp/p1"
             " && echo same-processes; sleep 30")

    async def body(sb: Any) -> tuple[Any, ...]:
        await sb.exec(f"( setsid sh -c '{ticker}' >/dev/null 2>&1 < /dev/null & ) ;"
                      f" ( setsid sh -c '{forker}' >/dev/null 2>&1 < /dev/null & ) ; sleep 0.5")
        scoring = asyncio.create_task(sb.exec(["sh", "-c", watch], user="scorer", timeout=3))
        await asyncio.sleep(1.0)
        refused = await sb.exec("echo ran")
        timed = await scoring
        after = await sb.exec("cat /tmp/tick; sleep 0.5; cat /tmp/tick")
        return refused, timed, after

    async def go() -> tuple[Any, ...]:
        async with started_sandbox(image) as sb:
            return await body(sb)

    refused, timed, after = run(go())
    assert refused.exit_code == 126 and "paused while a score call runs" in refused.stderr
    assert "ran" not in refused.stdout
    assert timed.timed_out
    assert len(timed.stdout.split()) == 4, timed.stdout
    first, states, second, same = timed.stdout.split()
    assert first == second  # the ticker was frozen for the whole call
    # the forker too, all of it: in the cgroup freezer's refrigerator (D) or stopped by its own hand (T)
    assert states in ("D", "T") and same == "same-processes", timed.stdout
    before, later = after.stdout.split()
    assert int(later) > int(before)  # running again after the timeout


def test_the_scorer_can_read_an_agents_private_files_in_the_solution(image: str) -> None:
    """Scoring no longer runs as the agent, so what the agent made 0600 (mkstemp, umask 077)
    or closed (its home 0700) is opened up for the score call, as RE-Bench's scorer could read it."""

    async def body(sb: Any) -> Any:
        made = await sb.exec(f"umask 077; mkdir -p {sb.paths.solution} && cd {sb.paths.solution}"
                             " && mkdir -p deep/er && echo inner > deep/er/file.txt && echo top > top.txt"
                             " && chmod 700 /home/agent && ln -s /etc/shadow shadow && ln -s / root")
        assert made.ok, made.stderr
        read = await sb.exec(["cat", f"{sb.paths.solution}/deep/er/file.txt", f"{sb.paths.solution}/top.txt"],
                             user="scorer")
        return read, await sb.exec(["stat", "-c", "%a", "/etc/shadow", "/root"], user="root")

    async def go() -> Any:
        async with started_sandbox(image) as sb:
            return await body(sb)

    read, modes = run(go())
    assert read.ok and read.stdout.split() == ["inner", "top"], read.stderr
    assert modes.stdout.split() == ["640", "700"]  # links the agent planted were not followed
