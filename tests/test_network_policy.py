"""`rebench run --network none|full` without Docker: the option's validation, the local backend's
refusal, the attempt row's column (and its migration), `attempts show` and the report keeping
attempts with and without network apart. The Docker side is tests/test_network_docker.py and
tests/adversarial/test_network_full.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from alembic import command
from alembic.config import Config

from rebench import api
from rebench.store.db import Store
from rebench.store.models import Attempt
from rebench.store.schema import MIGRATIONS_DIR

from .conftest import run_main


def _argv(db: Path, tmp_path: Path, *extra: str) -> list[str]:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": "echo 11 > value.txt"}, {"score": {}}, {"submit": None}]}))
    return ["run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--budget", "1m",
            "--db", str(db), *extra]


@pytest.mark.parametrize("value", ["bogus", "FULL", ""])
def test_a_bad_network_value_is_one_line_naming_it_and_nothing_is_written(
        fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    db = tmp_path / "rebench.db"
    code, _, err = run_main(_argv(db, tmp_path, "--backend", "local", "--network", value), capsys)
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"invalid --network {value!r}; allowed: none, full" in lines[0], err
    assert not db.exists()


@pytest.mark.parametrize("value", ["full", "none"])
def test_the_local_backend_refuses_any_network_it_cannot_enforce(
        fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    """The local backend controls no network (its commands have the host's): asking it for one,
    either one, is refused rather than run with something else."""
    db = tmp_path / "rebench.db"
    code, _, err = run_main(_argv(db, tmp_path, "--backend", "local", "--network", value), capsys)
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"invalid --network {value} with --backend local" in lines[0], err
    assert "controls no network" in lines[0] and "--backend docker" in lines[0], err
    assert not db.exists()


def test_attempts_show_says_what_each_attempt_could_reach(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "rebench.db"
    store = Store(db)
    with store.session() as session:
        for backend, network in (("docker", "none"), ("docker", "full"), ("local", "none")):
            session.add(Attempt(source="own", environment="counter", profile="tiny", agent="replay", budget_s=60.0,
                                status="done", backend=backend, network=network))
    store.close()
    said = {}
    for attempt_id in (1, 2, 3):
        code, out, err = run_main(["attempts", "show", str(attempt_id), "--db", str(db)], capsys)
        assert code == 0, err
        said[attempt_id] = " ".join(out.split())
    assert "network none (loopback only)" in said[1], said[1]
    assert "network full (its own bridged network, the host closed to it): not comparable" in said[2], said[2]
    assert "network none (not enforced: the local backend's commands have the host's network)" in said[3], said[3]
    code, out, _ = run_main(["attempts", "show", "2", "--json", "--db", str(db)], capsys)
    assert json.loads(out)["network"] == "full"


def test_the_migration_gives_old_attempts_none_and_metr_runs_full(tmp_path: Path) -> None:
    """A database made before the column: own attempts had no network, METR's runs had RE-Bench's internet."""
    db = tmp_path / "old.db"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{db}")
    command.upgrade(config, "0007")
    with sqlite3.connect(db) as connection:
        assert "network" not in [row[1] for row in connection.execute("pragma table_info(attempts)")]
        for source in ("own", "imported"):
            connection.execute(
                "insert into attempts (source, environment, env_version, profile, agent, budget_s, seed, status, "
                "counted, created_at, wall_s, working_s, model_wait_s, input_tokens, output_tokens, cached_tokens, "
                "cost_usd, submitted) values (?, 'counter', '1', 'tiny', 'a', 60, 0, 'done', 1, "
                "'2024-01-01 00:00:00', 0, 0, 0, 0, 0, 0, 0, 1)", (source,))
    Store(db).close()
    with sqlite3.connect(db) as connection:
        assert connection.execute("select source, network from attempts order by id").fetchall() == [
            ("own", "none"), ("imported", "full")]


def test_the_report_never_pools_attempts_with_and_without_network(fixture_envs: Path, tmp_path: Path) -> None:
    db = tmp_path / "rebench.db"
    store = Store(db)
    with store.session() as session:
        for raw, network in ((11.0, "none"), (11.0, "none"), (1.0, "full"), (6.0, "full")):
            session.add(Attempt(source="own", environment="counter", env_version="1.0.0", profile="tiny",
                                agent="replay", budget_s=60.0, status="done", final_raw=raw, network=network))
    report = api.report(store, n_bootstrap=50)
    store.close()
    assert report is not None
    rows = [r for r in report.rows if r.environment == "counter" and r.k == 1 and r.total_s == 60.0]
    assert {r.agent: (r.n, r.mean) for r in rows} == {"replay": (2, 1.0), "replay (network full)": (2, 0.25)}
    assert {s.agent for s in report.summary} == {"replay", "replay (network full)"}
    assert any(note.startswith("2 own attempt(s) ran with network") for note in report.notes), report.notes


def test_full_is_refused_before_anything_runs_where_the_host_firewall_cannot_be_set(
        fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without iptables (here: not on PATH) the host could not be closed to the attempt: refused, one
    line, nothing written, nothing built (this needs no Docker engine: it is checked first)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    db = tmp_path / "rebench.db"
    code, _, err = run_main(_argv(db, tmp_path, "--backend", "docker", "--network", "full"), capsys)
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "--network full needs iptables on the Docker engine's host" in lines[0], err
    assert not db.exists()
