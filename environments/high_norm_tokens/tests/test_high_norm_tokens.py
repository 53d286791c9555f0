"""High-Norm Tokens on a quick build: the defect is planted and measured, the reference finds it
from the blocks' weights, the starting solution does not, and the agent's files hold no token path."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import small_build

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def built() -> Path:
    return small_build.build_once()


def _solution(tmp_path: Path, which: str) -> Path:
    folder = tmp_path / which
    shutil.copytree(small_build.ENV / which, folder)
    return folder


def test_reference_finds_the_defect_and_the_start_does_not(built: Path, tmp_path: Path) -> None:
    reference = small_build.score(built, _solution(tmp_path, "reference"))
    start = small_build.score(built, _solution(tmp_path, "workspace"))
    assert reference["raw"] is not None and reference["raw"] > 0.9, reference
    assert reference["message"]["explode_layer_correct"] and reference["message"]["decay_layer_correct"], reference
    assert start["raw"] is not None and start["raw"] < 0.3, start


def test_the_agents_files_have_no_token_path(built: Path) -> None:
    import torch

    blocks = torch.load(built / "home" / "blocks.pth", weights_only=True)
    assert blocks and all(key.startswith(("transformer.h.", "transformer.ln_f.")) for key in blocks), sorted(blocks)
    assert sorted(p.name for p in (built / "home").iterdir()) == ["blocks.pth", "model_config.json",
                                                                   "profile_params.json"]
    full = torch.load(built / "protected" / "model.pth", weights_only=True)
    assert "transformer.wte.weight" in full and "transformer.wpe.weight" in full


def test_a_malformed_prediction_is_invalid(built: Path, tmp_path: Path) -> None:
    solution = tmp_path / "bad"
    solution.mkdir()
    (solution / "predict.py").write_text(
        "def predict(blocks, config):\n    return {'explode_layer': 0, 'decay_layer': 3, 'direction': [1.0]}\n")
    result = small_build.score(built, solution)
    assert result["raw"] is None and "explode_layer is 0" in result["message"]["error"], result


def test_a_prediction_past_its_time_limit_is_invalid(built: Path, tmp_path: Path) -> None:
    """The time limit is what keeps predict.py to analysis of the weights rather than long searches."""
    solution = tmp_path / "slow"
    solution.mkdir()
    (solution / "predict.py").write_text("import time\n\ndef predict(blocks, config):\n    time.sleep(60)\n")
    result = small_build.score(built, solution)
    assert result["raw"] is None and "longer than 5 s" in result["message"]["error"], result
