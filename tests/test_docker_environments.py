"""The model environments in Docker: an agent cannot read their held-out data, the Scaling Law
ground-truth sweep, LLM Foundry's hidden training file and reference model or the Rust hidden
problems (both splits: score calls' and the held-out final's), nor find a readable copy of them
anywhere in its container. Each test builds the environment's image (tiny, or the
smaller `ci` profile where one exists), then either probes as the agent in a sandbox set up as an
attempt's is (the same start and install, without scoring the starting solution, which tells the
probe nothing and costs up to half a minute of CPU) or runs an adversarial `replay` attempt."""

from __future__ import annotations

import sys

import pytest

from .conftest import REPO, run_cli
from .docker_support import attempt_sandbox, base_image, docker_engine, run, scored_as_an_attempt

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HELD_OUT = {
    "activation_sparsity": ["heldout.bin", "final.bin"],
    "fix_embedding": ["val.bin", "final.bin"],
    "restricted_mlm": ["heldout.bin", "final.bin"],
    "small_scaling_law": ["sweep_tiny.json", "sweep_paper.json"],
    "optimize_llm_foundry": ["hidden_data.jsonl", "reference_model.json"],
    "high_norm_tokens": ["model.pth", "heldout.bin", "build_report.json"],
    "rust_codecontests_inference": ["test.jsonl", "final.jsonl"],
}
PROFILE = {"optimize_llm_foundry": "ci", "rust_codecontests_inference": "ci"}


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_files_are_unreadable(name: str) -> None:
    base_image(docker_engine())
    profile = PROFILE.get(name, "tiny")
    built = run_cli("envs", "build", name, "--profile", profile, "--backend", "docker", timeout=1200)
    assert built.returncode == 0, built.stderr
    probes = []
    for filename in HELD_OUT[name]:
        probes += [f"echo '## {filename}'", f"wc -c /protected/{filename}",
                   f"wc -c /opt/rebench/env/protected/{filename}"]
    # one walk of the whole file system for all the names (each walk reads every folder of the image)
    names = " -o ".join(f"-name {filename}" for filename in HELD_OUT[name])
    probes.append(f"find / -xdev \\( {names} \\) -readable -print 2>/dev/null | sed 's/^/READABLE /'")
    probe = "ls /protected; " + "; ".join(probes) + "; true"
    seen = run(_as_the_agent(name, profile, probe))
    assert "READABLE" not in seen, seen
    denied = seen.count("Permission denied")
    assert denied >= 1 + len(HELD_OUT[name]), seen  # ls /protected and each wc -c /protected/FILE
    for filename in HELD_OUT[name]:
        assert f"/protected/{filename}\n" not in seen.replace("wc: ", ""), seen


async def _as_the_agent(name: str, profile: str, command: str) -> str:
    """What `command` prints (stdout and stderr) run as the agent's bash tool runs it
    (rebench.context.AttemptContext.bash) in a fresh `attempt_sandbox`."""
    async with attempt_sandbox(name, profile) as (sandbox, _gateway, _env):
        done = await sandbox.exec(f"{{ {command}; }} 2>&1", user="agent", timeout=300)
    assert done.exit_code == 0, done.stderr
    return done.stdout


def test_restricted_mlm_model_cannot_read_held_out_data_during_scoring() -> None:
    """The scorer must read /protected/heldout.bin, but the agent's model.py runs in a
    confined child during the score call: it cannot open the file nor read the scorer's memory."""
    sys.path.insert(0, str(REPO / "environments" / "restricted_mlm" / "tests"))
    from test_restricted_mlm_rules import PEEK_REPORT, PEEKING_MODEL

    from rebench.environments.registry import EnvironmentRegistry

    base_image(docker_engine())
    built = run_cli("envs", "build", "restricted_mlm", "--profile", "tiny", "--backend", "docker", timeout=1200)
    assert built.returncode == 0, built.stderr
    vocab = EnvironmentRegistry(REPO / "environments").get("restricted_mlm").profile("tiny").params["vocab_size"]
    model = PEEKING_MODEL.format(vocab=vocab, heldout="/protected/heldout.bin", protected="/protected")
    scored = scored_as_an_attempt("restricted_mlm", "tiny", {"model.py": model})
    # the model reports what it tried in the error it raises (it can write nowhere the agent reads)
    assert scored.raw is None and PEEK_REPORT in str(scored.message), scored
