"""nanogpt_chat_rl's held-out splits are data the agent never saw (issue 31): on the built `ci`
assets, no prompt of either held-out split (the intermediate one every score call uses, the final
one scored after the attempt) is among the training prompts the agent reads or in the corpus the
student was pretrained on.

The corpus is not written by the build (it lives only in the build's process), so the test takes
the build's own draws (build.py's `draw_prompts`) and first checks them against the files the
build wrote: the held-out splits and the training prompts on disk are exactly those draws.

Slow: the `ci` build (shared with tests/test_chat_env_model.py's cache)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry
from rebench.kit.buildutil import load_file

from .conftest import REPO

ENV = "nanogpt_chat_rl"
ENV_DIR = REPO / "environments" / ENV
PARAMS = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"]["ci"]["params"]

pytestmark = pytest.mark.slow


def prompts_of(path: Path) -> list[str]:
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


def test_no_held_out_prompt_is_a_training_prompt_or_in_the_corpus() -> None:
    built = assets_dir(EnvironmentRegistry(REPO / "environments").get(ENV), "ci")
    assert built is not None
    build = load_file("chat_build_under_test", ENV_DIR / "build.py", reuse=False)
    draws = build.draw_prompts(PARAMS, int(PARAMS["build_seed"]))
    splits = {"intermediate": prompts_of(built / "protected" / "prompts.jsonl"),
              "final": prompts_of(built / "protected" / build.FINAL_PROMPTS)}
    train = prompts_of(built / "workspace" / "data" / "prompts.jsonl")
    assert (splits["intermediate"], splits["final"], train) == (draws.test, draws.final, draws.train)
    assert (len(splits["intermediate"]), len(splits["final"])) == (PARAMS["n_test"], PARAMS["n_final"])
    assert len(draws.corpus) == PARAMS["corpus_size"]

    corpus = {prompt.text for prompt in draws.corpus}
    seen = {split: (sorted(set(prompts) & set(train)), sorted(set(prompts) & corpus))
            for split, prompts in splits.items()}
    assert seen == {split: ([], []) for split in splits}, {
        split: f"{len(in_train)} training prompts, {len(in_corpus)} in the corpus"
        for split, (in_train, in_corpus) in seen.items()}
