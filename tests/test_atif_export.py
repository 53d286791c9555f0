"""`rebench export atif`: one ATIF trajectory per attempt, for an attempt of each agent kind (claude-code,
codex, modular, aide, replay, human; tests/atif_campaigns.py), each accepted by Harbor's own validator
(`python -m harbor.utils.trajectory_validator`, from a side venv: tests/harbor_validator.py) and read
back with Harbor's Trajectory model, and compared with the store (plain SQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.atif_campaigns import COMMAND, SAID, AgentKinds, build, calls, export, steps
from tests.conftest import run_main
from tests.harbor_validator import harbor_python, load_with_harbor, validate

pytestmark = pytest.mark.slow  # the campaigns: about 10 s


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentKinds]:
    yield from build(tmp_path_factory.mktemp("atif"))


@pytest.fixture(scope="module")
def harbor(request: pytest.FixtureRequest) -> Path:
    assert request.config.cache is not None
    return harbor_python(request.config.cache.mkdir("harbor"))


@pytest.fixture(scope="module")
def exported(kinds: AgentKinds, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    with pytest.MonkeyPatch.context() as patch, _Capture() as capsys:
        patch.setenv("REBENCH_ENVIRONMENTS", str(kinds.db.parent / "envs"))
        return export(kinds.db, tmp_path_factory.mktemp("trajectories"), capsys)  # type: ignore[arg-type]


class _Capture:
    """capsys for a module fixture: the CLI's stdout and stderr, captured around one call."""

    def __enter__(self) -> _Capture:
        import contextlib
        import io

        self._out, self._err = io.StringIO(), io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._out))
        self._stack.enter_context(contextlib.redirect_stderr(self._err))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def readouterr(self) -> Any:
        out, err = self._out.getvalue(), self._err.getvalue()
        self._out.seek(0), self._out.truncate(), self._err.seek(0), self._err.truncate()
        return type("Captured", (), {"out": out, "err": err})()


def test_every_agent_kind_exports_one_trajectory_that_harbor_accepts(
        kinds: AgentKinds, exported: dict[int, dict[str, Any]], harbor: Path) -> None:
    assert sorted(exported) == sorted(kinds.ids.values()), "one trajectory per attempt"
    for agent, attempt_id in kinds.ids.items():
        trajectory = exported[attempt_id]
        path = Path(trajectory["path"])
        assert path.name == "trajectory.json" and path.parent.name.startswith(f"attempt-{attempt_id}_")
        assert agent in path.parent.name
        accepted, said = validate(harbor, path)
        assert accepted, f"{agent}: {said}"
        again = json.loads(load_with_harbor(harbor, path))
        assert again["schema_version"] == "ATIF-v1.7" and again["agent"]["name"] == agent
        assert [s["step_id"] for s in again["steps"]] == list(range(1, trajectory["steps"] + 1))
        assert again["steps"] == [{k: v for k, v in s.items() if v is not None} for s in trajectory["file"]["steps"]]


def test_steps_tokens_and_scores_match_the_store(kinds: AgentKinds, exported: dict[int, dict[str, Any]]) -> None:
    for agent, attempt_id in kinds.ids.items():
        trajectory = exported[attempt_id]
        (attempt,) = kinds.rows("select * from attempts where id = ?", attempt_id)
        model_calls = kinds.rows("select data from events where attempt_id = ? and kind = 'model_call' order by seq",
                                 attempt_id)
        llm = [s for s in steps(trajectory, "agent") if s.get("llm_call_count") == 1]
        assert len(llm) == len(model_calls), agent
        for step, row in zip(llm, model_calls, strict=True):
            data = json.loads(row["data"])
            assert step["metrics"]["prompt_tokens"] == data["input_tokens"]
            assert step["metrics"]["completion_tokens"] == data["output_tokens"]
            assert step["message"] == data["text"], "the model's text, as recorded"
        final = trajectory["file"]["final_metrics"]
        assert (final["total_prompt_tokens"], final["total_completion_tokens"]) == (attempt["input_tokens"],
                                                                                   attempt["output_tokens"])
        assert final["total_cost_usd"] == pytest.approx(attempt["cost_usd"])
        assert final["total_steps"] == trajectory["steps"] == len(steps(trajectory))
        facts = trajectory["file"]["extra"]["rebench"]
        scores = kinds.rows("select kind, raw from score_events where attempt_id = ? order by id", attempt_id)
        assert [(s["kind"], s["raw"]) for s in facts["scores"]] == [(s["kind"], s["raw"]) for s in scores]
        assert facts["final"]["raw"] == attempt["final_raw"] and facts["status"] == attempt["status"]
        assert facts["working_s"] == attempt["working_s"] and facts["env_hash"] == attempt["env_hash"]
        pauses = kinds.rows("select reason from pauses where attempt_id = ? order by id", attempt_id)
        assert [p["reason"] for p in facts["pauses"]] == [p["reason"] for p in pauses]
        if attempt["final_normalized"] is not None:
            assert facts["final"]["normalized"] == pytest.approx(attempt["final_normalized"])


def test_the_modular_attempt_keeps_its_text_calls_and_results(kinds: AgentKinds,
                                                              exported: dict[int, dict[str, Any]]) -> None:
    trajectory = exported[kinds.ids["modular"]]
    first = steps(trajectory)
    assert [s["source"] for s in first[:4]] == ["system", "system", "user", "agent"]  # baseline, prompt, task
    (start,) = kinds.rows("select data from events where kind = 'start' and attempt_id = ?", kinds.ids["modular"])
    instructions = json.loads(start["data"])["instructions"]
    assert first[2]["message"].startswith(instructions) and first[2]["message"] != instructions, \
        "the task as the agent sent it (with its clock line)"
    assert first[3]["message"] == SAID, "byte for byte"
    raw = Path(trajectory["path"]).read_bytes()
    assert all(32 <= b < 127 or b == 10 for b in raw), "only printable ASCII and the line breaks between steps"
    assert b"\\u0007" in raw and b"\\u001b[31m" in raw and b"\\u00e9" in raw
    assert [(f, a) for f, a, _ in calls(trajectory)] == [("bash", {"command": COMMAND}), ("score", {}),
                                                         ("submit", {"answer": "done"})]
    assert "atif-sentinel-42" in calls(trajectory)[0][2][0], "the command's output is the call's observation"
    scored = next(s for s in steps(trajectory, "agent") if s["tool_calls"][0]["function_name"] == "score")
    assert scored["extra"]["score_calls"][0]["rows"][0]["kind"] == "intermediate"
    tools = {t["function"]["name"] for t in trajectory["file"]["agent"]["tool_definitions"]}
    assert {"bash", "score", "submit"} <= tools and trajectory["file"]["agent"]["model_name"] == "openai/scripted"


def test_installed_agents_calls_have_their_tool_results_from_the_next_request(
        kinds: AgentKinds, exported: dict[int, dict[str, Any]]) -> None:
    claude, codex = exported[kinds.ids["claude-code"]], exported[kinds.ids["codex"]]
    assert calls(claude) == [("Bash", {"command": "cat notes.txt"}, ["notes: unroll the loop"])]
    assert steps(claude)[0] == {**steps(claude)[0], "source": "system", "message": "You are a coding agent."}
    assert steps(claude, "agent")[-1]["message"] == "The notes say to unroll the loop."
    assert calls(codex) == [("exec_command", {"cmd": "ls -la"}, ["solution.py"])]
    assert [t["function"]["name"] for t in codex["file"]["agent"]["tool_definitions"]] == ["exec_command"]
    for trajectory in (claude, codex):
        assert "body_file" not in json.dumps(trajectory["file"]), "the host's body-file paths stay out"


def test_aide_replay_and_human_actions_are_steps_of_their_own(kinds: AgentKinds,
                                                             exported: dict[int, dict[str, Any]]) -> None:
    replay = exported[kinds.ids["replay"]]
    assert [(f, a) for f, a, _ in calls(replay)] == [
        ("write_file", {"path": "value.txt", "content": "6"}), ("score", {}),
        ("write_file", {"path": "value.txt", "content": "oops"}), ("score", {}), ("submit", {})]
    assert all(s.get("llm_call_count") == 0 and "metrics" not in s for s in steps(replay, "agent"))
    aide = exported[kinds.ids["aide"]]
    tree = aide["file"]["extra"]["rebench"]["aide_tree"]
    assert [(n["node"], n["step"], n["score"]) for n in tree] == [(1, "draft", 7.0), (2, "improve", 9.0)]
    assert [s["message"] for s in steps(aide, "system") if s["message"].startswith("aide node")] == [
        "aide node 1 (draft)", "aide node 2 (improve of node 1)"]
    human = exported[kinds.ids["human"]]
    tasks = [(a["command"], a["args"]) for f, a, _ in calls(human) if f == "task"]
    assert tasks == [("start", []), ("score", []), ("note", ["trying", "seven"]), ("submit", [])], \
        "each `task` command once: the score and submit calls it made are that step"
    scored = next(s for s in steps(human, "agent") if s["tool_calls"][0]["arguments"].get("command") == "score")
    assert scored["extra"]["scores"][0]["raw"] == 7.0


@pytest.mark.parametrize(("args", "message"), [
    (["--campaign", "99"], "no campaign with id 99"),
    (["--attempt", "12345"], "no attempt with id 12345"),
])
def test_unknown_ids_are_one_line_errors_and_write_nothing(
        kinds: AgentKinds, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    out = tmp_path / "out"
    code, _, err = run_main(["export", "atif", "--db", str(kinds.db), "--out", str(out), *args], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_one_attempt_and_a_link_in_place_of_its_folder(kinds: AgentKinds, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    attempt_id = kinds.ids["replay"]
    (written,) = export(kinds.db, out, capsys, "--attempt", str(attempt_id)).values()
    folder = Path(written["path"]).parent
    target = tmp_path / "elsewhere"
    target.mkdir()
    Path(written["path"]).unlink()
    folder.rmdir()
    folder.symlink_to(target)
    code, _, err = run_main(["export", "atif", "--db", str(kinds.db), "--out", str(out), "--attempt",
                             str(attempt_id)], capsys)
    assert code == 2 and "is a link or a file" in err and list(target.iterdir()) == []


def test_without_inspect_installed_agents_keep_their_recorded_calls(kinds: AgentKinds, tmp_path: Path) -> None:
    """Inspect made unimportable for the process (as on an install without the `inspect` extra): the
    export still writes every trajectory; an installed agent's steps keep the text and tool calls of
    their events, and say what was not rebuilt."""
    import subprocess
    import sys

    from tests.conftest import REPO

    without = ("import sys\nsys.modules.update({'inspect_ai': None, 'inspect_ai.model': None})\n"
               "from rebench.cli.app import main\nmain(sys.argv[1:])\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", without, "export", "atif", "--db", str(kinds.db), "--out", str(out),
                           "--attempt", str(kinds.ids["claude-code"])], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "", "REBENCH_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("*/trajectory.json")
    agent = [s for s in json.loads(path.read_text())["steps"] if s["source"] == "agent"]
    assert [c["function_name"] for s in agent for c in s.get("tool_calls") or []] == ["Bash"]
    assert agent[-1]["message"] == "The notes say to unroll the loop."
    assert all("pip install 'rebench[inspect]'" in s["extra"]["request"] for s in agent)
