"""Shortcuts on rust_codecontests_inference's `tiny` profile (issue 25, items 10 and 11): a
solution that never calls the model and writes the Rust itself from what the validation split
shows. The scaffold (payloads/rust_shortcut_scaffold.py) holds a perfect handler for every
operation template of the validation problems; it is scored by the environment's real scorer
(confined module, rustc, every hidden test) on the hidden split the `tiny` build writes.

Seen to succeed before the defence: the hidden problems used the validation problems'
operations (and often their very sentences), so matching the visible templates solved 10/40
hidden problems and searching the visible operations on the public tests 20/40, against 8/40
for the starting solution and 18/40 for the reference. Now the hidden split uses only
operations the validation split never shows (the model trains on all of them), so neither
finds anything to match. (The problems' names, which spelled out their operation, are covered
by the generator's own tests.)"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rebench.kit.buildutil import load_file
from rebench.scoring import score_helper

from ..conftest import REPO

needs_rustc = pytest.mark.skipif(shutil.which("rustc") is None,
                                 reason="rustc is not installed (apt-get install -y rustc)")
pytestmark = [pytest.mark.adversarial, pytest.mark.slow, needs_rustc]

ENV_DIR = REPO / "environments" / "rust_codecontests_inference"
SCAFFOLD = Path(__file__).parent / "payloads" / "rust_shortcut_scaffold.py"
PROFILE = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"]["tiny"]
build = load_file("rust_build_under_test", ENV_DIR / "build.py", reuse=False)


def _solution_folder(folder: Path, visible: list[dict[str, Any]], mode: str) -> Path:
    """The scaffold with its handlers: what an agent writes after reading the validation split.
    Only the operations and sentences of the visible problems go into handlers.json."""
    generator = build.sibling("generator")
    templates, ops = [], []
    for problem in visible:
        family, name, _, _, _, wording, _ = problem["task"]
        op = next(op for op in generator._OPS if (op.family, op.name) == (family, name))
        templates.append([family, name, op.wordings[wording]])
        ops.append([family, name])
    folder.mkdir(parents=True)
    table = {"mode": mode, "ops": sorted(map(list, {tuple(op) for op in ops})),
             "templates": [list(t) for t in dict.fromkeys(map(tuple, templates))],
             "input_lines": {family: line for family, line in generator._INPUTS.items()
                             if family in {op[0] for op in ops}}}
    (folder / "handlers.json").write_text(json.dumps(table))
    shutil.copy(ENV_DIR / "generator.py", folder / "problem_generator.py")
    shutil.copy(SCAFFOLD, folder / "solve_code_contests_rust.py")
    return folder


def _load_scaffold(folder: Path) -> ModuleType:
    return load_file(f"rust_shortcut_{folder.name}", folder / "solve_code_contests_rust.py", reuse=False)


def _score_on_hidden(tmp_path: Path, solution: Path, hidden: list[dict[str, Any]]) -> dict[str, Any]:
    """The environment's scorer on `hidden`, written as the build writes /protected/test.jsonl;
    the gateway address leads nowhere (the scaffold never calls the model)."""
    protected, home = tmp_path / "protected", tmp_path / "home"
    home.mkdir()
    build.write_jsonl(protected / "test.jsonl", hidden)
    (protected / "gateway.env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=scorer\n")
    ctx = {**PROFILE["params"], "home": str(home), "solution": str(solution), "protected": str(protected),
           "confine_command": score_helper.confine_command(str(protected)), "call_token": "call-token"}
    result: dict[str, Any] = load_file("rust_score_under_test", ENV_DIR / "scoring" / "score.py",
                                       reuse=False).score(ctx)
    return result


@pytest.mark.parametrize("mode", ["template", "search"])
def test_a_scaffold_that_writes_the_rust_from_the_visible_templates_scores_no_better_than_the_start(
        tmp_path: Path, mode: str) -> None:
    visible, hidden, _ = build.generated_problems(PROFILE["params"])
    solution = _solution_folder(tmp_path / "solution", visible, mode)
    scaffold = _load_scaffold(solution)
    # It is a competent scaffold: every validation problem gets the generator's own program
    # (which tests/test_model_generator.py compiles and runs on every test).
    for problem in visible:
        assert scaffold.by_template(problem["description"]) == problem["solution"], problem["description"]
    result = _score_on_hidden(tmp_path, solution, hidden)
    assert result["raw"] is not None, result
    details = result["details"]
    assert details["generation_errors"] == [] and details["compiled"] == details["programs"], details
    start = float(PROFILE["anchors"]["start"])
    assert result["raw"] <= start, (f"{mode}: {result['message']['n_successes']}/{len(hidden)} hidden problems "
                                    f"solved without the model, the start solves {start:.2f}", details)
