"""rust_codecontests_inference's held-out final split (`final_split`, docs/heldout.md) on the `ci`
profile, with real parts: the built hidden splits, the trained model behind the gateway, the real
scorer, the CLI on the local backend and the report.

A scaffold fitted to the hidden split every score call uses stands for an agent that probed it:
the test, privileged, reads the built /protected/test.jsonl and hands the module the generator's
own program for each of those problems; on any other problem it is the starting solution. Its
best intermediate score is then perfect while its held-out final is the start's, so the report
shows a large held-out gap and flags it; the reference scores as well on both splits (relative to
each split's anchors), so its gap is about zero. The reference's two attempts are the session's
(tests/reference_runs.py); this test adds the scaffold's attempt to a copy of their database.

Slow: the `ci` build trains the model (shared with tests/test_rust_env_model.py's cache)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.api import build_environment, report
from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry
from rebench.kit.buildutil import load_file

from .conftest import REPO, RecordedRun, run_cli
from .reference_runs import rust_reference_runs  # noqa: F401

ENV = "rust_codecontests_inference"
ENV_DIR = REPO / "environments" / ENV
PARAMS = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"]["ci"]["params"]

pytestmark = [pytest.mark.slow, pytest.mark.one_core,  # the fixed model answers within a wall-clock limit per problem
              pytest.mark.skipif(shutil.which("rustc") is None, reason="rustc is not installed")]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tuned_module(protected: Path) -> str:
    """The starting solution with a table of the intermediate hidden problems' programs in front."""
    generator = load_file("rust_heldout_generator", ENV_DIR / "generator.py", reuse=False)
    known = {problem["name"]: problem["solution"]
             for problem in generator.generate("test", int(PARAMS["n_test"]), int(PARAMS["seed"]) + 1)}
    hidden = read_jsonl(protected / "test.jsonl")
    assert {problem["name"] for problem in hidden} == set(known)  # the build wrote the generator's problems
    table = {problem["description"]: known[problem["name"]] for problem in hidden}
    start = (ENV_DIR / "start_tiny" / "solve_code_contests_rust.py").read_text()
    return start + f'''

_KNOWN = {table!r}
_start_solution = generate_solution


async def generate_solution(client, semaphore, problem):  # type: ignore[no-redef]
    known = _KNOWN.get(problem["description"])
    return known if known is not None else await _start_solution(client, semaphore, problem)
'''


def test_a_scaffold_fitted_to_the_intermediate_split_shows_a_heldout_gap_and_the_reference_none(
        tmp_path: Path, db_path: Path, rust_reference_runs: RecordedRun) -> None:  # noqa: F811
    env = EnvironmentRegistry().get(ENV)
    build_environment(env, "ci", "local")
    built = assets_dir(env, "ci", build=False)
    assert built is not None
    protected = built / "protected"
    names = {split: {problem["name"] for problem in read_jsonl(protected / file)}
             for split, file in (("intermediate", "test.jsonl"), ("final", "final.jsonl"))}
    assert len(names["final"]) == PARAMS["n_final"] and not names["final"] & names["intermediate"]

    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "solve_code_contests_rust.py", "content": tuned_module(protected)}},
        {"score": {}}, {"submit": None}]}))
    rust_reference_runs.copy_to(db_path)
    ran = run_cli("run", "--env", ENV, "--profile", "ci", "--agent", "replay",
                  "--agent-arg", f"script={script}", "--budget", "5m", "--backend", "local",
                  "--db", str(db_path), "--no-calibrate")
    assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute("select a.agent, s.kind, s.raw from score_events s join attempts a "
                                  "on a.id = s.attempt_id where s.kind in ('intermediate', 'heldout')").fetchall()
    raw: dict[tuple[str, str], list[float | None]] = {}
    for agent, kind, value in rows:
        raw.setdefault((agent, kind), []).append(value)
    split = env.profile("ci").final_split
    assert split is not None
    # fitted: every intermediate problem solved; on the held-out split it is the starting solution
    assert raw[("replay", "intermediate")] == [1.0]
    assert raw[("replay", "heldout")] == [split.anchors.start]
    # the anchors are measured, and the scoring is deterministic: both reference attempts score them
    assert raw[("reference", "heldout")] == [split.anchors.reference] * 2

    made = report(db_path, budgets="5m", at="5m", n_bootstrap=200)
    assert made is not None
    agents = {summary.agent: summary for summary in made.agents}
    tuned, reference = agents["replay"], agents["reference"]
    anchors = env.profile("ci").anchors
    fitted = (1.0 - anchors.start) / (anchors.reference - anchors.start)  # best intermediate, normalized
    assert tuned.heldout_gap == pytest.approx(fitted) and tuned.heldout_gap > split.margin
    assert (tuned.probing, tuned.heldout_n) == (1, 1)
    assert reference.heldout_gap is not None and abs(reference.heldout_gap) <= split.margin
    assert (reference.probing, reference.heldout_n) == (0, 2)
