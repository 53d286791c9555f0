"""Attack class 4: a Restricted MLM model.py that switches the operation rules off.

The model rebinds the enforcer's entry point (`restricted`) and its dispatch hook in every
enforcer module it can reach from its own process, then uses LayerNorm, tanh and
log_softmax. Whatever it patches, the score call must record the forbidden operation and
give no valid score.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO, run_cli
from ..docker_support import base_image, docker_engine

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]


def test_a_model_that_patches_the_enforcer_gets_no_valid_score(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "environments" / "restricted_mlm" / "tests"))
    from test_restricted_mlm_rules import FORBIDDEN_IN_RULE_BREAKING_MODEL, RULE_BREAKING_MODEL

    from rebench.environments.registry import EnvironmentRegistry

    base_image(docker_engine())
    built = run_cli("envs", "build", "restricted_mlm", "--profile", "tiny", "--backend", "docker", timeout=1200)
    assert built.returncode == 0, built.stderr
    vocab = EnvironmentRegistry(REPO / "environments").get("restricted_mlm").profile("tiny").params["vocab_size"]
    script = tmp_path / "patch-enforcer.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "model.py", "content": RULE_BREAKING_MODEL.format(vocab=vocab)}},
        {"score": {}}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    result = run_cli("run", "--env", "restricted_mlm", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "tiny", "--budget", "5m", "--backend", "docker", "--db", str(db), timeout=900)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        (status,), = connection.execute("select status from attempts").fetchall()
        scores = connection.execute(
            "select kind, raw, valid, message from score_events where kind != 'baseline' order by id").fetchall()
    assert status == "done"
    assert scores, "the score call was not recorded"
    for kind, raw, valid, message in scores:
        assert raw is None and not valid, (kind, raw, message)
        error = json.loads(message).get("error", "")
        assert "not allowed" in error and any(op in error for op in FORBIDDEN_IN_RULE_BREAKING_MODEL), error
