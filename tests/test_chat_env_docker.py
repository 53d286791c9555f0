"""nanogpt_chat_rl on the Docker backend (network none): from inside the sandbox the judge answers
only through the gateway's root forwarder (evaluation.py, the agent's meter), while its program,
its world and the held-out prompts (both splits: score calls' and the held-out final's) are
nowhere the agent can read, and the gateway's socket is closed to it; the scorer's judge calls go
on the scorer's meter, for the score calls and the held-out final alike. The one Docker run of
this environment in CI (the `ci` profile)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry

from .conftest import REPO, run_cli
from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ASK = ("import sys; sys.path.insert(0, '.'); from evaluation import evaluate; "
       "print('VERDICT', evaluate(['name a fruit .', 'name a fruit .'], "
       "[('apple is a fruit .', 'dog is a fruit .'), ('dog is a fruit .', 'apple is a fruit .')]))")


def probe(name: str, command: str) -> str:
    return f"if {command} >/dev/null 2>&1; then echo {name}-OPEN; else echo {name}-CLOSED; fi"


def test_the_judge_and_the_held_out_prompts_are_reachable_only_through_the_gateway(tmp_path: Path) -> None:
    base_image(docker_engine())
    built = assets_dir(EnvironmentRegistry().get("nanogpt_chat_rl"), "ci")
    assert built is not None
    train = set((built / "workspace" / "data" / "prompts.jsonl").read_text().splitlines())
    held_out, final = (next(line for line in (built / "protected" / name).read_text().splitlines()
                            if line not in train)  # the final split's prompts may be training prompts too
                       for name in ("prompts.jsonl", "final_prompts.jsonl"))
    secrets = {"JUDGE": "_longest_common_run",  # in judge.py's source only
               "WORLD": '"all_colors"',  # in the judge's world.json only
               "HELDOUT": json.loads(held_out)["prompt"],
               "FINAL": json.loads(final)["prompt"],
               "CANARY": "class AnnotatorError"}  # evaluation.py, which the agent may read: the search works
    assert all(secrets["JUDGE"] not in p.read_text() for p in (REPO / "environments" / "nanogpt_chat_rl").rglob("*.py")
               if p.name != "judge.py")
    # one walk of the whole file system for every secret (each walk reads every text file of the image)
    patterns = " ".join(f"-e '{text}'" for text in secrets.values())
    searches = [f"grep -rhosIF --exclude-dir=proc --exclude-dir=sys {patterns} / | sort -u | sed 's/^/MATCH /'"]
    probes = [probe("PROMPTS", "cat /protected/prompts.jsonl"),
              probe("OUTPUTS", "cat /protected/reference_outputs/student.jsonl"),
              probe("FINAL_PROMPTS", "cat /protected/final_prompts.jsonl"),
              probe("FINAL_OUTPUTS", "cat /protected/final_reference_outputs/student.jsonl"),
              probe("ASSETS", "ls /opt/rebench/env"),
              probe("SOCKET", "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect("
                              "'/run/rebench/gateway/gateway.sock')\""),
              probe("SCORER_KEY", "cat /protected/gateway.env")]
    script = tmp_path / "probe.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"python": ASK},
        {"bash": {"command": "; ".join(probes + searches), "timeout": 600}},
        {"score": {}},
        {"submit": None}]}))
    db = tmp_path / "r.db"
    result = run_cli("run", "--env", "nanogpt_chat_rl", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "ci", "--budget", "15m", "--backend", "docker", "--db", str(db), timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        outputs = {kind: json.loads(data).get("stdout", "") for kind, data in
                   connection.execute("select kind, data from events where kind in ('python', 'bash')")}
        scores = connection.execute("select kind, raw, message from score_events order by id").fetchall()
        metered = connection.execute("select meter, status, count(*) from gateway_requests group by meter, status")
        meters = {(meter, status): count for meter, status, count in metered}
    assert "VERDICT [True, False]" in outputs["python"], outputs
    found = set(outputs["bash"].split())
    matched = {line.removeprefix("MATCH ") for line in outputs["bash"].splitlines() if line.startswith("MATCH ")}
    found |= {f"{name}-{'FOUND' if text in matched else 'ABSENT'}" for name, text in secrets.items()}
    assert {"PROMPTS-CLOSED", "OUTPUTS-CLOSED", "FINAL_PROMPTS-CLOSED", "FINAL_OUTPUTS-CLOSED", "ASSETS-CLOSED",
            "SOCKET-CLOSED", "SCORER_KEY-CLOSED", "JUDGE-ABSENT", "WORLD-ABSENT", "HELDOUT-ABSENT", "FINAL-ABSENT",
            "CANARY-FOUND"} <= found, outputs["bash"]
    assert [kind for kind, _, _ in scores] == ["baseline", "intermediate", "heldout"]  # ci's final split, in the image
    for _, raw, message in scores:
        assert raw is not None and json.loads(message)["n_prompts"] == 48, message
    assert meters[("agent", 200)] == 2 and meters[("scorer", 200)] > 0, meters
    assert set(meters) == {("agent", 200), ("scorer", 200)}, meters
