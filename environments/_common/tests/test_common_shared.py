"""The shared parts: the agent's copies of kit modules in sync, the synthetic corpus deterministic
and its entropy right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.kit import corpus
from rebench.sandbox.base import SandboxPaths

COMMON = Path(__file__).resolve().parents[1]


def test_the_agents_copies_of_kit_modules_are_in_sync() -> None:
    result = subprocess.run([sys.executable, str(COMMON / "agent_copies.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_corpus_is_deterministic_and_in_range() -> None:
    spec = corpus.SourceSpec()
    a = corpus.generate(spec, 5000, stream_seed=3)
    b = corpus.generate(spec, 5000, stream_seed=3)
    c = corpus.generate(spec, 5000, stream_seed=4)
    assert a.dtype == np.uint16 and len(a) == 5000
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.max() < spec.eot  # the end-of-text / mask id never occurs in the stream


def test_entropy_rate_matches_an_empirical_estimate() -> None:
    """The exact entropy rate equals the average log-loss of the true model on samples."""
    spec = corpus.SourceSpec()
    probs = corpus.transition_table(spec)
    tokens = corpus.generate(spec, 200_000, stream_seed=5, n_streams=1).astype(np.int64)
    nll = -np.log(probs[tokens[:-2], tokens[1:-1], tokens[2:]]).mean()
    assert abs(nll - corpus.entropy_rate(spec)) < 0.02


def test_tokenizer_round_trips() -> None:
    spec = corpus.SourceSpec()
    tok = corpus.WordTokenizer.for_spec(spec)
    ids = corpus.generate(spec, 50, stream_seed=1).tolist()
    assert tok.encode(tok.decode(ids)) == ids
    assert len(set(tok.words)) == spec.vocab_size


@pytest.mark.parametrize("name", ["fix_embedding", "restricted_mlm", "small_scaling_law"])
@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_instructions_fill_every_placeholder(name: str, profile: str) -> None:
    text = EnvironmentRegistry(COMMON.parent).get(name).instructions(profile, SandboxPaths())
    assert "${" not in text and "/home/agent/solution" in text


def test_build_rejects_an_unknown_profile(tmp_path: Path) -> None:
    env_dir = COMMON.parent / "small_scaling_law"
    result = subprocess.run([sys.executable, str(env_dir / "build.py"), "--profile", "huge", "--out", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "unknown profile 'huge'" in result.stderr and "tiny" in result.stderr
