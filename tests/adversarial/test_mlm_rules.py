"""Attack class 4: a Restricted MLM model.py that switches the operation rules off.

The model rebinds the enforcer's entry point (`restricted`) and its dispatch hook in every
enforcer module it can reach from its own process, then uses LayerNorm, tanh and
log_softmax. Whatever it patches, the score call must record the forbidden operation and
give no valid score. One score call as an attempt makes it, on the tiny image
(tests/docker_support.py: scored_as_an_attempt).
"""

from __future__ import annotations

import sys

import pytest

from ..conftest import REPO, run_cli
from ..docker_support import base_image, docker_engine, scored_as_an_attempt

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]


def test_a_model_that_patches_the_enforcer_gets_no_valid_score() -> None:
    sys.path.insert(0, str(REPO / "environments" / "restricted_mlm" / "tests"))
    from test_restricted_mlm_rules import FORBIDDEN_IN_RULE_BREAKING_MODEL, RULE_BREAKING_MODEL

    from rebench.environments.registry import EnvironmentRegistry

    base_image(docker_engine())
    built = run_cli("envs", "build", "restricted_mlm", "--profile", "tiny", "--backend", "docker", timeout=1200)
    assert built.returncode == 0, built.stderr
    vocab = EnvironmentRegistry(REPO / "environments").get("restricted_mlm").profile("tiny").params["vocab_size"]
    scored = scored_as_an_attempt("restricted_mlm", "tiny", {"model.py": RULE_BREAKING_MODEL.format(vocab=vocab)})
    assert scored.raw is None, scored
    error = scored.message.get("error", "")
    assert "not allowed" in error and any(op in error for op in FORBIDDEN_IN_RULE_BREAKING_MODEL), error
