"""rust_codecontests_inference without a model: the shared evaluation harness (rust_eval.py)
on real rustc compilations, the scorer's confinement of generated programs (no /protected, no
network), the paper profile's operator asset and the local backend's rustc preflight, all on
real files, processes and the real command line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.kit.buildutil import load_file
from rebench.scoring import score_helper

from .conftest import REPO, run_cli

ENV_DIR = REPO / "environments" / "rust_codecontests_inference"
needs_rustc = pytest.mark.skipif(shutil.which("rustc") is None,
                                 reason="rustc is not installed (apt-get install -y rustc)")


def load(name: str, path: Path) -> ModuleType:
    return load_file(name, path, reuse=False)


rust_eval = load("rust_eval_under_test", ENV_DIR / "scoring" / "rust_eval.py")

ECHO_SUM = """use std::io::Read;
fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let total: i64 = s.split_whitespace().map(|x| x.parse::<i64>().unwrap()).sum();
    println!("{}", total);
}
"""


def test_extract_rust_takes_rust_blocks_first_then_any_block_then_a_bare_program() -> None:
    assert rust_eval.extract_rust("x\n```python\nprint(1)\n```\n```rust\nfn main() {}\n```") == ["fn main() {}\n"]
    assert rust_eval.extract_rust("```\nfn main() {}\n```") == ["fn main() {}\n"]
    assert rust_eval.extract_rust("fn main() { }") == ["fn main() { }\n"]
    assert rust_eval.extract_rust("I cannot solve this.") == []


def test_public_view_hides_hidden_tests_and_solutions() -> None:
    problem = {"name": "p", "description": "d", "public_tests": {"input": ["1"], "output": ["1"]},
               "private_tests": {"input": ["2"], "output": ["2"]}, "generated_tests": {"input": [], "output": []},
               "solution": "fn main() {}"}
    assert rust_eval.public_view(problem) == {"name": "p", "description": "d", "public_tests": problem["public_tests"]}
    assert rust_eval.tests_of(problem) == [("1", "1"), ("2", "2")]


@needs_rustc
def test_harness_judges_right_wrong_broken_and_slow_programs() -> None:
    tests = [("1 2\n", "3\n"), ("5 5 5\n", "15")]
    assert rust_eval.check(ECHO_SUM, tests)
    assert not rust_eval.check(ECHO_SUM, [("1 2\n", "4\n")])
    broken = rust_eval.run_program("fn main() { let x: i32 = \"no\"; }", ["1\n"])
    assert not broken["compiled"] and "compilation error" in broken["error"]
    slow = rust_eval.run_program("fn main() { loop {} }", ["1\n", "2\n"], test_timeout_s=0.5)
    assert slow["compiled"] and slow["runs"] == [{"status": "timeout", "stdout": ""}]  # stops at the first failure
    assert not rust_eval.passes(slow, ["1", "2"])


@needs_rustc
def test_memory_limit_stops_a_program_that_allocates_too_much() -> None:
    hog = "fn main() { let v = vec![0u8; 1 << 31]; println!(\"{}\", v[12345]); }"
    result = rust_eval.run_program(hog, ["\n"], memory_bytes=256 << 20)
    assert result["compiled"] and result["runs"][0]["status"] == "error"
    assert rust_eval.run_program(hog, ["\n"], memory_bytes=None)["runs"][0]["status"] == "ok"


@needs_rustc
def test_generated_programs_cannot_read_protected_files_nor_reach_the_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scorer's compile-and-run child (run_worker.py behind the helper's confinement): a program
    that reads the hidden split and one that connects to a listening TCP port both fail, while the
    same programs succeed when run unconfined (so the failure is the confinement's doing)."""
    protected = tmp_path / "protected"
    protected.mkdir()
    (protected / "test.jsonl").write_text("the hidden answers\n")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    secret = protected / "test.jsonl"
    reader = (f'fn main() {{ match std::fs::read_to_string("{secret}") {{ Ok(s) => println!("READ {{}}", s.trim()), '
              'Err(_) => println!("DENIED") } }')
    connector = (f'fn main() {{ match std::net::TcpStream::connect("127.0.0.1:{port}") {{ '
                 'Ok(_) => println!("CONNECTED"), Err(_) => println!("REFUSED") } }')
    score = load("rust_score_under_test", ENV_DIR / "scoring" / "score.py")
    ctx: dict[str, Any] = {"workers": 2, "test_timeout_s": 2.0, "memory_mb": 512, "run_timeout_s": 60,
                           "confine_command": score_helper.confine_command(str(protected))}
    problems = [{"public_tests": {"input": ["\n"], "output": [""]}}] * 2
    results, facts = score.run(ctx, [reader, connector], problems)
    assert facts["confined"] and "error" not in facts, facts
    assert results[0]["runs"][0]["stdout"].strip() == "DENIED"
    assert results[1]["runs"][0]["stdout"].strip() == "REFUSED"
    with pytest.raises(BlockingIOError):
        listener.accept()
    unconfined = [rust_eval.run_program(program, ["\n"]) for program in (reader, connector)]
    assert unconfined[0]["runs"][0]["stdout"].strip() == "READ the hidden answers"
    assert unconfined[1]["runs"][0]["stdout"].strip() == "CONNECTED"
    listener.close()


def test_paper_build_without_the_problem_files_says_what_and_where(tmp_path: Path, isolated_cache: Path) -> None:
    result = run_cli("envs", "build", "rust_codecontests_inference", "--profile", "paper", "--backend", "local",
                     env={"REBENCH_ASSETS": str(tmp_path / "no-settings.toml")})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "'code_contests'" in lines[0] and "taoroalin/code_contests_slim_json" in lines[0]
    assert "--asset code_contests=PATH" in lines[0]
    assert not list(isolated_cache.glob("assets/rust_codecontests_inference/paper-*"))  # other profiles may be built


def test_local_backend_preflight_names_the_apt_line_when_rustc_is_missing_from_the_sandbox_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rebench import preflight
    from rebench.sandbox import local

    env = EnvironmentRegistry().get("rust_codecontests_inference")
    assert preflight.system_packages(env) == ["rustc"]
    monkeypatch.setattr(local, "SYSTEM_PATH", str(tmp_path))  # the sandboxes' system PATH, without rustc
    with pytest.raises(RebenchError, match=r"needs `rustc` .*`apt-get install -y rustc`"):
        preflight.check(env, "tiny", "run", backend="local")
    preflight.check(env, "tiny", "run", backend="docker")  # the image has it
    (tmp_path / "rustc").write_text("#!/bin/sh\n")
    (tmp_path / "rustc").chmod(0o755)
    preflight.check(env, "tiny", "run", backend="local")


def _scored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str,
            call_token: str | None = "call-token", final: bool = False, **params: Any) -> dict[str, Any]:
    """score.py's result for a solution folder holding `module`, on two hidden problems (the
    gateway.env names a port nothing listens on: these modules never call the model). The
    harness hands each score call its own token (`call_token`); None: it did not. `final`: the
    held-out split's file is written too, its one problem named `final-p`; `params` are laid
    over the `ci` profile's."""
    protected, home, solution = (tmp_path / name for name in ("protected", "home", "solution"))
    for folder in (protected, home, solution):
        folder.mkdir(parents=True)
    problem = {"name": "p", "description": "print 3", "public_tests": {"input": [""], "output": ["3"]},
               "private_tests": {"input": ["x"], "output": ["3"]}, "generated_tests": {"input": [], "output": []},
               "solution": "fn main() { println!(\"3\"); }"}
    (protected / "test.jsonl").write_text("\n".join([json.dumps(problem)] * 2) + "\n")
    if final:
        (protected / "final.jsonl").write_text(json.dumps({**problem, "name": "final-p"}) + "\n")
    (protected / "gateway.env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=scorer\n")
    (solution / "solve_code_contests_rust.py").write_text(module)
    profile_params = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"]["ci"]["params"]
    ctx = {**profile_params, **params, "home": str(home), "solution": str(solution), "protected": str(protected),
           "confine_command": score_helper.confine_command(str(protected)),
           **({"call_token": call_token} if call_token is not None else {})}
    return load("rust_score_under_test", ENV_DIR / "scoring" / "score.py").score(ctx)


def test_the_scorer_reads_the_hidden_file_its_split_param_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile's split ("intermediate": test.jsonl) for score calls, "final" (final.jsonl) for
    the held-out final; a final split that is missing or a split of another name is an invalid
    score, never the validation split the scorer falls back to when run by hand."""
    module = "async def generate_solution(client, semaphore, problem):\n    raise ValueError(problem['name'])\n"

    def names(result: dict[str, Any]) -> set[str]:
        return set(result["details"]["generation_errors"])

    assert names(_scored(tmp_path / "a", monkeypatch, module, final=True)) == {"ValueError: p"}
    assert names(_scored(tmp_path / "b", monkeypatch, module, final=True, split="final")) == {"ValueError: final-p"}
    missing = _scored(tmp_path / "c", monkeypatch, module, split="final")
    assert missing["raw"] is None and "final.jsonl is missing or not readable" in missing["message"]["error"]
    unknown = _scored(tmp_path / "d", monkeypatch, module, final=True, split="heldout")
    assert unknown["raw"] is None and "unknown split 'heldout'" in unknown["message"]["error"]


def test_the_final_split_continues_the_hidden_draw_and_leaves_the_hidden_split_as_it_was() -> None:
    """tiny's and ci's held-out final split: n_final problems of the hidden operations, none of
    them a task of the hidden split, which is exactly what it was before the final split existed
    (the intermediate anchors were measured on it)."""
    build = load("rust_build_under_test", ENV_DIR / "build.py")
    generator = build.sibling("generator")
    for profile in ("tiny", "ci"):
        params = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"][profile]["params"]
        _, hidden, final = build.generated_problems(params)
        assert hidden == generator.generate("test", params["n_test"], params["seed"] + 1)
        assert len(final) == params["n_final"] > 0
        assert not {generator.task_key(p) for p in final} & {generator.task_key(p) for p in hidden}
        assert not {p["name"] for p in final} & {p["name"] for p in hidden}
        hidden_ops = {(op.family, op.name) for op in generator.split_ops("test")}
        assert {tuple(p["task"][:2]) for p in final} <= hidden_ops


def test_the_module_gets_the_calls_token_never_the_scorers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, route 2: the client handed to generate_solution holds the score call's own token;
    without one the scorer refuses to run the module rather than hand it its own."""
    module = "async def generate_solution(client, semaphore, problem):\n    raise ValueError(client.api_key)\n"
    result = _scored(tmp_path, monkeypatch, module)
    assert set(result["details"]["generation_errors"]) == {"ValueError: call-token"}, result  # one per problem
    (tmp_path / "again").mkdir()
    refused = _scored(tmp_path / "again", monkeypatch, module, call_token=None)
    assert refused["raw"] is None and "no gateway token for this score call" in refused["message"]["error"]


def test_a_module_without_generate_solution_is_an_invalid_score(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _scored(tmp_path, monkeypatch, "def solve(problem):\n    return ''\n")
    assert result["raw"] is None and "defines no generate_solution" in result["message"]["error"]


@needs_rustc
def test_the_module_sees_no_hidden_tests_and_its_programs_are_judged_on_all_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call reports the keys it was given (as its error), the second returns a program
    that passes the public test only: neither problem counts as solved, by the hidden test."""
    module = '''
calls = []
async def generate_solution(client, semaphore, problem):
    calls.append(1)
    if len(calls) == 1:
        raise ValueError(",".join(sorted(problem)))
    return ('use std::io::Read; fn main() { let mut s = String::new(); '
            'std::io::stdin().read_to_string(&mut s).unwrap(); if s.is_empty() { println!("3"); } }')
'''
    result = _scored(tmp_path, monkeypatch, module)
    assert result["raw"] == 0.0 and result["message"]["n_problems"] == 2, result
    assert result["details"]["generation_errors"] == ["ValueError: description,name,public_tests"]
    assert result["details"]["compiled"] == 1


def test_a_scorer_without_rustc_gives_an_invalid_score_not_zero(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no rustc for the scorer's children
    module = "async def generate_solution(client, semaphore, problem):\n    return 'fn main() {}'\n"
    result = _scored(tmp_path, monkeypatch, module)
    assert result["raw"] is None and "rustc is not installed" in result["message"]["error"], result


@needs_rustc
def test_neither_the_module_nor_its_programs_leave_the_problems_or_test_inputs_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, route 2: generate_solution copies every problem it receives into /tmp, /dev/shm
    and a world-writable folder of the agent's, and its program copies its stdin (the hidden
    tests' inputs) to the same places. Confined to its scratch folder, every copy fails and the
    score call still ends normally; nothing is left for the agent."""
    drop = tmp_path / "agent_drop"
    drop.mkdir()
    drop.chmod(0o777)
    tag = f"rebench-leak-{os.getpid()}"
    places = [f"/tmp/{tag}", f"/dev/shm/{tag}", str(drop / "leak")]
    rust_places = ", ".join(f'"{place}-stdin"' for place in places)
    program = ("use std::io::Read; use std::io::Write; fn main() { let mut s = String::new(); "
               "std::io::stdin().read_to_string(&mut s).unwrap(); "
               f"for p in [{rust_places}].iter() {{ if let Ok(mut f) = std::fs::OpenOptions::new()"
               ".create(true).append(true).open(p) { let _ = f.write_all(s.as_bytes()); } } }")
    module = (f"import json\nPLACES = {places!r}\nPROGRAM = {program!r}\n"
              "async def generate_solution(client, semaphore, problem):\n"
              "    for place in PLACES:\n"
              "        try:\n"
              "            with open(place + '-problem', 'a') as handle:\n"
              "                handle.write(json.dumps(problem))\n"
              "        except OSError:\n"
              "            pass\n"
              "    return PROGRAM\n")
    try:
        result = _scored(tmp_path, monkeypatch, module)
        assert result["raw"] is not None and result["details"]["compiled"] == 2, result
        assert result["details"]["solution_confined"] and result["details"]["programs_confined"], result
        left = [p + suffix for p in places for suffix in ("-problem", "-stdin") if os.path.exists(p + suffix)]
        assert left == [], f"the score call left {left}"
    finally:
        for place in places:
            for suffix in ("-problem", "-stdin"):
                if os.path.exists(place + suffix):
                    os.unlink(place + suffix)
