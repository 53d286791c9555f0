"""The gateway in whole attempts: `rebench run` (real CLI, local backend, real SQLite) on the
`gateway_echo` fixture environment, whose tiny local model is a stdlib test double; a replay agent
loops requests from inside the sandbox with the token from its api.env."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import yaml

from .conftest import run_cli

LOOP = r"""
import json, os, urllib.request, urllib.error
env = dict(line.strip().split("=", 1) for line in open(os.path.join(os.environ["REBENCH_HOME"], "api.env")))
statuses = []
for i in range(6):
    body = json.dumps({"model": env["REBENCH_GATEWAY_MODEL"], "messages": [{"role": "user", "content": f"q{i}"}]})
    request = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
                                     headers={"Authorization": "Bearer " + env["OPENAI_API_KEY"]})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            statuses.append(response.status)
            answer = json.loads(response.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        statuses.append(exc.code)
        if exc.code == 429:
            print("refused:", json.loads(exc.read())["error"]["message"])
print("statuses", statuses)
open("answer.txt", "w").write(answer)
"""


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def run_replay(tmp_path: Path, db: Path, *extra: str) -> tuple[int, str, str]:
    script = tmp_path / "loop.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"bash": "cat \"$REBENCH_HOME/api.env\"; cat /protected/gateway.env 2>&1 | head -1"},
        {"python": LOOP}, {"score": {}}, {"submit": None}]}))
    result = run_cli("run", "--env", "gateway_echo", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--budget", "2m", "--backend", "local", "--db", str(db), *extra,
                     env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"]})
    return result.returncode, result.stdout, result.stderr


def test_credit_cap_gives_429_and_the_attempt_goes_on(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    # one agent request: ~3 input + 5 output tokens at 1000 USD/Mtok = ~0.008 USD, but it reserves its worst
    # case first (~3 input + max_tokens=64 output = ~0.067 USD): 0.08 covers 1-2, then 429
    code, out, err = run_replay(tmp_path, db_path, "--env-param", "credit=0.08")
    assert code == 0, err
    assert "env params credit=0.08" in out
    (status, final_raw) = rows(db_path, "select status, final_raw from attempts")[0]
    assert status == "done" and final_raw == 1.0  # it went on: wrote its answer, scored, submitted
    agent = rows(db_path, "select status, error from gateway_requests where meter = 'agent' order by id")
    statuses = [s for s, _ in agent]
    assert statuses[0] == 200 and statuses[-1] == 429 and set(statuses) == {200, 429}
    assert statuses == sorted(statuses)  # once spent, always refused
    assert all("credit spent" in e for s, e in agent if s == 429)
    scorer = rows(db_path, "select status from gateway_requests where meter = 'scorer'")
    assert scorer == [(200,), (200,)]  # baseline and the agent's score call, on the scorer's own meter
    events = rows(db_path, "select data from events where kind = 'python'")
    assert "refused: credit spent" in json.loads(events[0][0])["stdout"]
    shown = run_cli("attempts", "show", "1", "--db", str(db_path))
    assert shown.returncode == 0, shown.stderr
    assert f"gateway (agent): {len(statuses)} requests ({statuses.count(429)} refused)" in shown.stdout
    detail = json.loads(run_cli("attempts", "show", "1", "--json", "--db", str(db_path)).stdout)
    assert detail["gateway"]["agent"]["requests"] == len(statuses)
    assert detail["gateway"]["scorer"]["requests"] == 2
    report = run_cli("report", "--json", "--db", str(db_path))
    assert report.returncode == 0, report.stderr
    row = json.loads(report.stdout)[0]
    assert row["gateway_requests"] == len(statuses) and row["gateway_refused"] == statuses.count(429)
    assert row["gateway_cost_usd"] == detail["gateway"]["agent"]["cost_usd"] > 0
    terminal = run_cli("report", "--db", str(db_path))
    assert "model gateway usage" in terminal.stdout and "gateway_echo" in terminal.stdout


def test_api_env_holds_the_agents_token_and_gateway_env_the_scorers(fixture_envs: Path, tmp_path: Path,
                                                                    db_path: Path) -> None:
    code, _out, err = run_replay(tmp_path, db_path)
    assert code == 0, err
    (data,) = rows(db_path, "select data from events where kind = 'bash'")[0]
    shown = json.loads(data)["stdout"]
    assert "OPENAI_BASE_URL=http://127.0.0.1:" in shown and "OPENAI_API_KEY=rbgw-" in shown
    agent = rows(db_path, "select count(*) from gateway_requests where meter = 'agent' and status = 200")
    assert agent == [(6,)]  # no cap without --env-param: the profile's credit (1 USD) is not reached


def test_unknown_env_param_is_one_line_naming_the_allowed_keys(fixture_envs: Path, tmp_path: Path,
                                                              db_path: Path) -> None:
    code, _out, err = run_replay(tmp_path, db_path, "--env-param", "budget=3")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: unknown --env-param 'budget' for gateway_echo (tiny); allowed: credit, expected_prefix, scorer_sleep"]
    assert not db_path.exists() or rows(db_path, "select count(*) from attempts") == [(0,)]
    code, _out, err = run_replay(tmp_path, db_path, "--env-param", "credit=lots")
    assert code == 2 and "credit='lots'" in err
    code, _out, err = run_replay(tmp_path, db_path, "--env-param", "credit")
    assert code == 2 and "use KEY=VALUE" in err


def test_env_param_overrides_the_profiles_params(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    code, _out, err = run_replay(tmp_path, db_path, "--env-param", "expected_prefix=nope")
    assert code == 0, err
    assert rows(db_path, "select final_raw from attempts") == [(0.0,)]  # the scorer saw the run's value


def test_noise_measurement_scores_through_an_unmetered_gateway(fixture_envs: Path, db_path: Path) -> None:
    """Scoring outside an attempt (`rebench envs noise`, calibration) gets a gateway too: the scorer
    asks the model, the start scores 0 and the reference 1."""
    from rebench import api
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry(fixture_envs).get("gateway_echo")
    summary = api.measure_noise(env, "tiny", "local", n=2, db=db_path)
    assert (summary.start_mean, summary.reference_mean) == (0.0, 1.0)
    assert rows(db_path, "select count(*) from gateway_requests") == [(0,)]  # no attempt to meter against


def test_the_scorers_model_calls_are_paused_time(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    """Agent calls count as working time (its code waits on them, as in RE-Bench); the scorer's calls,
    made while a score call runs, stop the clock (a `scorer-model` pause), so a slow judge costs the
    agent nothing."""
    code, _out, err = run_replay(tmp_path, db_path, "--env-param", "scorer_sleep=1.5")
    assert code == 0, err
    (status, final_raw, wall, working), = rows(db_path, "select status, final_raw, wall_s, working_s from attempts")
    assert status == "done" and final_raw == 1.0
    paused = [length for (length,) in rows(db_path, "select end_s - start_s from pauses "
                                                     "where reason = 'scorer-model' order by id")]
    assert len(paused) == 2 and all(length >= 1.4 for length in paused)  # the baseline's and the score call's
    setup = rows(db_path, "select end_s from pauses where reason = 'setup'")[0][0]
    assert wall - working >= setup + paused[1] - 0.2  # the score call's model wait did not count
