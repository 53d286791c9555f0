"""final_score = "rescore_best": attempts through the real CLI, local backend, real SQLite, on the
`counter` fixture's `rescore` profile, whose `cycle A B C ...` values stand for a noisy timing
(the n-th scoring call of one text gives its n-th value; rescore: 2 candidates x 3 repeats)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rebench.scoring.rescore import ScoreSnapshot, choose_candidates, rescore_median

from .conftest import REPO, interruptible, run_cli

A = "cycle 9 2 6 7"  # scored 9 by the agent; re-scored 2, 6, 7: median 6
B = "cycle 8 7 7 7"  # scored 8 then 7 by the agent; re-scored 7, 7, 7: median 7


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def run_replay(tmp_path: Path, db: Path, actions: list, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    return run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                   "--budget", "2m", "--backend", "local", "--db", str(db), "--no-calibrate", *extra,
                   env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"]})


def test_median_ranks_invalid_last() -> None:
    assert rescore_median([2, 7, 6], "higher") == 6
    assert rescore_median([2, 7, 6], "lower") == 6
    assert rescore_median([None, 5, 6], "higher") == 5  # one failure: the worse of the valid two
    assert rescore_median([None, 5, 6], "lower") == 6
    assert rescore_median([None, None, 7], "higher") is None  # invalid half the time or more
    assert rescore_median([1, 3, 5, 9], "lower") == 4
    assert rescore_median([1, 3, None, 9], "lower") == 6
    assert rescore_median([1, None, None, 9], "lower") is None


def test_candidates_are_best_distinct_contents() -> None:
    snaps = [ScoreSnapshot(path="a", sha256="A", score_id=1, raw=5.0),
             ScoreSnapshot(path="a", sha256="A", score_id=2, raw=3.0),  # the same solution, luckier
             ScoreSnapshot(path="b", sha256="B", score_id=3, raw=4.0),
             ScoreSnapshot(path="c", sha256=None, score_id=4, raw=1.0),  # cut by the budget
             ScoreSnapshot(path="d", sha256="D", score_id=5, raw=None),  # invalid
             ScoreSnapshot(path="e", sha256="E", score_id=6, raw=6.0)]
    chosen, skipped = choose_candidates(snaps, 2, "lower")
    assert [s.score_id for s in chosen] == [2, 3]
    assert len(skipped) == 1 and "score 4" in skipped[0]


def test_final_is_rescored_median_and_the_agent_cannot_touch_it(fixture_envs: Path, tmp_path: Path,
                                                               db_path: Path) -> None:
    pid_file = tmp_path / "writer.pid"
    # each rewrite is a rename, so the final snapshot never catches the file emptied halfway through one
    writer = ("setsid bash -c 'sleep 0.3; while true; do echo 1000 > v.tmp; mv -f v.tmp value.txt; sleep 0.01; done' "
              f"> /dev/null 2>&1 < /dev/null & echo $! > {pid_file}")
    actions = [
        {"write_file": {"path": "value.txt", "content": A}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": B}}, {"score": {}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "50"}},  # changed after the last score call
        {"bash": writer},  # and a process left behind that keeps rewriting it
        {"sleep": 0.5},
        {"submit": None},
    ]
    result = run_replay(tmp_path, db_path, actions, "--profile", "rescore")
    assert result.returncode == 0, result.stderr
    (attempt_id, status, final_raw, final_norm, final_rule, rule_raw, rule_norm, snapshot), = rows(
        db_path, "select id, status, final_raw, final_normalized, final_rule, rule_raw, rule_normalized, "
                 "snapshot_path from attempts")
    # intermediate scores stay what the agent saw
    assert rows(db_path, "select raw from score_events where kind = 'intermediate' order by id") == [(9,), (8,), (7,)]
    # the final is the best of the candidates' medians (A: 6, B: 7), RE-Bench's rule is kept beside it
    assert (status, final_raw, final_rule, rule_raw) == ("done", 7.0, "rescore_best", 9.0)
    assert final_norm == pytest.approx(0.6) and rule_norm == pytest.approx(0.8)
    # a timing profile: in rounds, the starting and reference solutions are scored beside the candidates
    window = rows(db_path, "select kind, raw, details from score_events where kind not in "
                           "('baseline', 'intermediate') order by id")
    assert [kind for kind, _, _ in window] == ["anchor_start", "anchor_reference", "rescore", "rescore"] * 3
    assert [raw for kind, raw, _ in window if kind != "rescore"] == [1, 11] * 3
    rescores = [(raw, details) for kind, raw, details in window if kind == "rescore"]
    assert [raw for raw, _ in rescores] == [2, 7, 6, 7, 7, 7]
    intermediate_ids = [i for (i,) in rows(db_path, "select id from score_events where kind = 'intermediate'")]
    assert [json.loads(d)["rescore_of"] for _, d in rescores] == [intermediate_ids[0], intermediate_ids[1]] * 3
    # the agent's processes are gone, and what it left in the folder is not what was re-scored
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or b") Z" in Path(f"/proc/{pid}/stat").read_bytes()
    assert (Path(snapshot) / "value.txt").read_text().strip() in ("50", "1000")
    # one snapshot per distinct scored solution, under the attempt's snapshot folder
    base = Path(snapshot).parent
    assert sorted(p.name for p in base.iterdir()) == ["final", "score-001", "score-002"]
    assert (base / "score-001" / "value.txt").read_text() == A
    # both numbers are shown
    listed = json.loads(run_cli("attempts", "list", "--json", "--db", str(db_path)).stdout)[0]
    assert (listed["final_raw"], listed["final_rule"], listed["rule_raw"]) == (7.0, "rescore_best", 9.0)
    shown = json.loads(run_cli("attempts", "show", str(attempt_id), "--json", "--db", str(db_path)).stdout)
    assert (shown["normalized"], shown["rule_normalized"], shown["rescore_failed"]) == (pytest.approx(0.6),
                                                                                       pytest.approx(0.8), 0)
    text = run_cli("attempts", "show", str(attempt_id), "--db", str(db_path)).stdout
    assert "re-scored" in text and "RE-Bench rule" in text
    report = json.loads(run_cli("report", "--json", "--db", str(db_path)).stdout)
    assert report[0]["mean"] == pytest.approx(0.6) and report[0]["rule_mean"] == pytest.approx(0.8)
    assert report[0]["rescored"] == 1
    (start,), = rows(db_path, "select data from events where kind = 'start'")
    assert "2 best valid score calls" in json.loads(start)["instructions"]
    # an attempt cut short stands at its score-log standing, never above the re-scored final
    cut = json.loads(run_cli("report", "--json", "--budgets", "1m,2m", "--n-bootstrap", "50",
                             "--db", str(db_path)).stdout)
    (short,) = [r for r in cut if r["truncated"] and r["environment"] == "counter"]
    assert short["mean"] == pytest.approx(0.6) and short["rule_mean"] is None


def test_failed_rescores_are_counted(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    actions = [
        {"write_file": {"path": "value.txt", "content": "cycle 9 x 5 6"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "cycle 8 x x 7"}}, {"score": {}},
        {"submit": None},
    ]
    result = run_replay(tmp_path, db_path, actions, "--profile", "rescore")
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select final_raw, rule_raw from attempts") == [(5.0, 9.0)]
    assert rows(db_path, "select count(*) from score_events where kind = 'rescore' and valid = 0") == [(3,)]
    shown = json.loads(run_cli("attempts", "show", "1", "--json", "--db", str(db_path)).stdout)
    assert shown["rescore_failed"] == 3


def test_final_rule_option_opts_a_profile_in(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    actions = [{"write_file": {"path": "value.txt", "content": A}}, {"score": {}}, {"submit": None}]
    result = run_replay(tmp_path, db_path, actions, "--final-rule", "rescore_best")
    assert result.returncode == 0, result.stderr
    # the tiny profile's own rescore settings are the defaults (5 repeats): 2 6 7 7 7, median 7
    assert rows(db_path, "select final_raw, final_rule, rule_raw from attempts") == [(7.0, "rescore_best", 9.0)]
    # counter's instructions do not say how the final score is taken, so the rule is told after them
    (start,) = rows(db_path, "select data from events where kind = 'start'")
    assert "scored again 5 times each" in json.loads(start[0])["instructions"]
    bad = run_replay(tmp_path, tmp_path / "other.db", actions, "--final-rule", "median")
    assert bad.returncode == 2 and "median" in bad.stderr and "rescore_best" in bad.stderr
    other = tmp_path / "other.db"
    assert not other.exists() or rows(other, "select count(*) from attempts") == [(0,)]


def final_snapshot_taken(db: Path) -> bool:
    """The final snapshot is recorded just before re-scoring starts."""
    try:
        return rows(db, "select count(*) from events where kind = 'snapshot' "
                        "and json_extract(data, '$.score_id') is null") != [(0,)]
    except sqlite3.OperationalError:  # not created yet
        return False


@pytest.mark.one_core  # the interrupt must land while the re-scoring still runs
def test_interrupt_while_rescoring_leaves_a_rule_only_row(fixture_envs: Path, tmp_path: Path,
                                                          db_path: Path) -> None:
    script = tmp_path / "script.yaml"
    slow = "cycle 9 6/5 6/5 6/5"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": slow}}, {"score": {}}, {"submit": None}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "run", "--env", "counter", "--agent", "replay", "--agent-arg",
         f"script={script}", "--profile", "rescore", "--budget", "2m", "--backend", "local", "--db", str(db_path),
         "--no-calibrate"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not final_snapshot_taken(db_path):
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    (status, final_raw, final_rule, rule_raw), = rows(db_path, "select status, final_raw, final_rule, rule_raw "
                                                              "from attempts")
    assert (status, final_raw, final_rule, rule_raw) == ("interrupted", 9.0, "best", 9.0)
    notes = [json.loads(d)["message"] for (d,) in rows(db_path, "select data from events where kind = 'note'")]
    assert any("re-scoring interrupted" in n for n in notes), (notes, err)


def test_reference_agent_leaves_the_repeats_to_the_final_rule(fixture_envs: Path, db_path: Path) -> None:
    """A timing profile under rescore_best: the reference scores once and the harness re-scores it."""
    result = run_cli("run", "--env", "counter", "--agent", "reference", "--profile", "rescore", "--budget", "1m",
                     "--backend", "local", "--db", str(db_path), "--no-calibrate")
    assert result.returncode == 0, result.stderr
    kinds = rows(db_path, "select kind, count(*) from score_events group by kind order by kind")
    assert kinds == [("anchor_reference", 3), ("anchor_start", 3), ("baseline", 1), ("intermediate", 1),
                     ("rescore", 3)]
    assert rows(db_path, "select final_raw, final_rule from attempts") == [(11.0, "rescore_best")]


def test_calibration_takes_the_median_under_rescore_best(fixture_envs: Path, db_path: Path) -> None:
    from rebench.calibration import calibration_repeats, save_calibration
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.store.db import Store

    env = EnvironmentRegistry().get("counter")
    assert calibration_repeats(env, "rescore") == 3 and calibration_repeats(env, "tiny") == 3
    assert calibration_repeats(env, "rescore", 7) == 7
    store = Store(db_path)
    median = save_calibration(store, env, "rescore", [1.0, 3.0, 2.0], [9.0, 12.0, 11.0])
    best = save_calibration(store, env, "tiny", [1.0, 3.0, 2.0], [9.0, 12.0, 11.0])
    assert (median.start_raw, median.reference_raw) == (2.0, 11.0)
    assert (best.start_raw, best.reference_raw) == (3.0, 12.0)


@pytest.mark.docker
@pytest.mark.slow
def test_docker_rescore_kills_the_agent_and_uses_the_snapshots(fixture_envs: Path, tmp_path: Path,
                                                               db_path: Path) -> None:
    """The same on the Docker backend: the agent's background writer (its own session, as the agent
    user) is killed before re-scoring, and the file it changed after the last score call is not scored."""
    from .docker_support import base_image, docker_engine

    base_image(docker_engine())
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    built = run_cli("envs", "build", "counter", "--profile", "rescore", "--backend", "docker", env=env)
    assert built.returncode == 0, built.stderr
    script = tmp_path / "script.yaml"
    writer = ("setsid nohup bash -c 'sleep 0.3; while true; do echo 1000 > value.txt; sleep 0.01; done' "
              ">/dev/null 2>&1 &")
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": A}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "50"}}, {"bash": writer}, {"sleep": 0.5},
        {"submit": None}]}))
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "rescore", "--budget", "2m", "--backend", "docker", "--db", str(db_path),
                     "--no-calibrate", env=env)
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select status, final_raw, final_rule, rule_raw from attempts") == [
        ("done", 6.0, "rescore_best", 9.0)]
    assert [raw for (raw,) in rows(db_path, "select raw from score_events where kind = 'rescore'")] == [2, 6, 7]
    notes = [json.loads(d) for (d,) in rows(db_path, "select data from events where kind = 'note'")]
    assert any(n["message"] == "re-scored" and n["data"]["agent_processes_killed"] >= 1 for n in notes), notes


def test_without_score_snapshots_the_final_solution_is_rescored(fixture_envs: Path, tmp_path: Path,
                                                                db_path: Path) -> None:
    """`rescore.snapshot_each_score = false`: nothing is copied at score calls, so the solution the
    agent ended with is what gets re-scored (standing for its last valid score)."""
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text().replace("rescore = { candidates = 2, repeats = 3 }",
                                             "rescore = { candidates = 2, repeats = 3, snapshot_each_score = false }"))
    actions = [{"write_file": {"path": "value.txt", "content": A}}, {"score": {}},
               {"write_file": {"path": "value.txt", "content": "cycle 4 5 3"}}, {"submit": None}]
    result = run_replay(tmp_path, db_path, actions, "--profile", "rescore")
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select final_raw, final_rule, rule_raw from attempts") == [(4.0, "rescore_best", 9.0)]
    (snapshot,), = rows(db_path, "select snapshot_path from attempts")
    assert sorted(p.name for p in Path(snapshot).parent.iterdir()) == ["final"]


def test_a_stale_snapshot_folder_of_the_same_attempt_id_is_left_alone(fixture_envs: Path, tmp_path: Path,
                                                                      db_path: Path) -> None:
    """A deleted database of the same name left `rebench.db-snapshots/attempt-1`: the new attempt 1
    snapshots beside it, so its re-scoring still finds the solutions it scored."""
    folder = db_path.parent / f"{db_path.name}-snapshots"
    stale = folder / "attempt-1"
    (stale / "score-001").mkdir(parents=True)
    (stale / "score-001" / "value.txt").write_text("999")
    actions = [{"write_file": {"path": "value.txt", "content": A}}, {"score": {}}, {"submit": None}]
    result = run_replay(tmp_path, db_path, actions, "--profile", "rescore")
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select final_raw, snapshot_path from attempts") == [
        (6.0, str(folder / "attempt-1.2" / "final"))]
    assert (stale / "score-001" / "value.txt").read_text() == "999"
    assert sorted(p.name for p in stale.iterdir()) == ["score-001"]


STUBBORN_BACKEND = '''
from rebench.errors import SandboxError
from rebench.sandbox import local
from rebench.sandbox.base import SandboxBackend


def create(spec, env):
    sandbox = local.BACKEND.create(spec, env)

    async def cannot_kill():
        raise SandboxError("this backend cannot stop the agent's processes")

    sandbox.kill_agent_processes = cannot_kill
    return sandbox


BACKEND = SandboxBackend(create=create)
'''


def test_an_agent_that_cannot_be_stopped_is_not_rescored(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    """A third-party backend (installed through the real entry points) whose sandbox cannot stop
    the agent's processes: re-scoring beside them could be tampered with, so the attempt keeps
    RE-Bench's rule and says why. The local sandbox with a failing kill stands in for such a backend."""
    from .plugin_support import install_distribution

    install_distribution(tmp_path / "site", "stubborn_sandboxes", "stubborn_sandboxes", STUBBORN_BACKEND,
                         "rebench.sandboxes", {"stubborn": "BACKEND"})
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": A}}, {"score": {}}, {"submit": None}]}))
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "rescore", "--budget", "2m", "--backend", "stubborn", "--db", str(db_path),
                     "--no-calibrate",
                     env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"],
                          "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])})
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select final_raw, final_rule, rule_raw from attempts") == [(9.0, "best", 9.0)]
    assert rows(db_path, "select count(*) from score_events where kind = 'rescore'") == [(0,)]
    notes = [json.loads(data)["message"] for (data,) in rows(db_path, "select data from events where kind = 'note'")]
    assert any("not re-scored" in n and "cannot stop the agent's processes" in n for n in notes), notes
