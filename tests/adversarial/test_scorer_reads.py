"""The scorer reads nothing the agent can write (issue 24, route 4), per environment, on Docker.

GPT-2 QA's scorer decoded answers with `~/vocab.json`: root-owned and read-only, but in a folder
the agent owns, so the agent replaced it and changed its score. This test finds the same class of
hole in every environment: it scores the starting solution (the reference where REFERENCE_SCORED
says why) of each environment's built image (tiny; `ci` where one exists) with the scoring
helper's audit of every file the scoring program opens for reading (a Python audit hook), once
more with the held-out final's params where the profile declares a `final_split` (docs/heldout.md:
it reads another hidden file), then asks, as
the agent's uid in the same container, whether the agent could write any of those files or rename
anything in a folder on their path. Files the scorer makes for itself (its results, its scratch
folders) are left out; everything else must be closed to the agent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli
from tests.docker_support import base_image, docker_engine, run

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]

ENVIRONMENTS = ["activation_sparsity", "fix_embedding", "high_norm_tokens", "nanogpt_chat_rl", "optimize_llm_foundry",
                "restricted_mlm", "rust_codecontests_inference", "small_scaling_law", "triton_cumsum"]
PROFILE = {"optimize_llm_foundry": "ci", "nanogpt_chat_rl": "ci", "rust_codecontests_inference": "ci"}
"""The smaller `ci` profile where one exists: the other tests build those, so the image is built once."""
REFERENCE_SCORED = {"optimize_llm_foundry"}
"""Scored with the reference solution in place of the starting one: LLM Foundry's starting finetune.sh
costs 33 CPU-s on `ci`, the reference's 5, and the scorer opens the same files of its own for either
(what it opens in the solution folder is the submission, left out of the question): 1786 files
either way, the same ones (compared once)."""
AUDIT = "/protected/results/opened.txt"

# Run as the agent on each path the scorer opened: the path itself, then every folder above it.
# A folder the agent may write lets it rename or replace what is in it, unless the folder is
# sticky (/tmp) and the entry is someone else's.
PROBE = r"""
import json, os, stat, sys
found = []
for path in json.load(sys.stdin):
    if not os.path.lexists(path):
        # a missing file in a folder the agent can write could be planted before the next call
        parent = os.path.dirname(path)
        if os.access(parent, os.W_OK):
            found.append([path, "missing, in a folder the agent can write"])
        continue
    if os.access(path, os.W_OK) and not os.path.isdir(path):
        found.append([path, "the agent can write it"])
    child, parent = path, os.path.dirname(path)
    while True:
        try:
            info = os.lstat(parent)
            entry = os.lstat(child)
        except OSError:
            break
        if os.access(parent, os.W_OK | os.X_OK):
            sticky = bool(info.st_mode & stat.S_ISVTX)
            if not sticky or entry.st_uid == os.getuid():
                found.append([path, f"the agent can rename {child} (in {parent})"])
        if parent == "/":
            break
        child, parent = parent, os.path.dirname(parent)
print(json.dumps(found))
"""


def _not_in_question(path: str) -> bool:
    """Files the scoring call writes for itself, kernel files, and the submission itself (the
    solution folder is the agent's answer, read as untrusted input by design)."""
    return (path.startswith(("/proc/", "/sys/", "/dev/", "/protected/results/", "/home/agent/solution/"))
            or path == "/home/agent/solution" or "/rebench-scratch-" in path
            or path.endswith((".pyc", "__pycache__")))


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_the_agent_cannot_write_anything_its_scorer_reads(name: str) -> None:
    from rebench.calibration import load_reference, scoring_sandbox
    from rebench.environments.install import FINAL_PARAMS_FILE, PARAMS_FILE, SCORING_DIR
    from rebench.environments.registry import EnvironmentRegistry

    base_image(docker_engine())
    profile = PROFILE.get(name, "tiny")
    built = run_cli("envs", "build", name, "--profile", profile, "--backend", "docker", timeout=2400)
    assert built.returncode == 0, built.stderr[-3000:]
    env = EnvironmentRegistry(REPO / "environments").get(name)
    spec_profile = env.profile(profile)

    # a profile with a held-out final split is scored with its params too: it reads other files
    params_files = [PARAMS_FILE] + ([FINAL_PARAMS_FILE] if spec_profile.final_split is not None else [])

    async def go() -> tuple[list[str], list[Any]]:
        async with scoring_sandbox(env, profile, "docker") as (sandbox, gateway):
            paths = sandbox.paths
            if name in REFERENCE_SCORED:
                await load_reference(sandbox, env, log=lambda _: None)
            await sandbox.exec(["mkdir", "-p", paths.in_protected("results")], user="root", timeout=30)
            opened: list[str] = []
            for params in params_files:
                token = gateway.open_call_token() if gateway is not None else ""
                scored = await sandbox.exec(
                    [paths.python, paths.helper, "--program", paths.in_protected(SCORING_DIR, "score.py"),
                     "--params", paths.in_protected(params), "--out", "/protected/results/audit.json",
                     "--timeout", str(spec_profile.score_timeout_s), "--nonce-stdin", "--audit-open", AUDIT],
                    user="scorer", cwd=paths.home, timeout=spec_profile.score_timeout_s + 60,
                    stdin=f"nonce\n{token}\n".encode())
                assert scored.exit_code == 0, (scored.stdout[-2000:], scored.stderr[-2000:])
                opened += (await sandbox.exec(["cat", AUDIT], user="root")).stdout.split("\n")
            opened = sorted({p for p in opened if p and not _not_in_question(p)})
            probe = await sandbox.exec(["python3", "-c", PROBE], stdin=json.dumps(opened).encode(), cwd="/")
            assert probe.exit_code == 0, probe.stderr
            return opened, json.loads(probe.stdout)

    opened, writable = run(go())
    assert any(p.startswith("/protected/") for p in opened), opened  # the audit saw the scorer's reads
    assert writable == [], writable


def test_the_probe_finds_a_file_in_the_agents_home(tmp_path: Path) -> None:
    """The probe itself can fail: a root-owned read-only file in the agent's own folder is found."""
    from tests.docker_support import with_sandbox

    async def body(sb: Any) -> list[Any]:
        await sb.exec(["sh", "-c", "echo {} > /home/agent/vocab.json; chmod 444 /home/agent/vocab.json"],
                      user="root", cwd="/")
        probe = await sb.exec(["python3", "-c", PROBE], stdin=json.dumps(["/home/agent/vocab.json"]).encode())
        return list(json.loads(probe.stdout))

    found = with_sandbox(base_image(docker_engine()), body)
    assert found and "rename /home/agent/vocab.json" in found[0][1], found
