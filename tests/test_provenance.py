"""Which code produced a result (issue 28, item 12): the rebench version and the environment's content
hash on every attempt that rebench ran, in `--json` documents, `attempts show`, Inspect exports and
report files. A real local run of the `counter` fixture, a real SQLite file, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.provenance import rebench_version

from .conftest import run_cli, run_main


def test_an_attempt_records_the_rebench_and_the_environment_folder_that_ran_it(
        fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    ran = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                  "--db", str(db), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert ran.returncode == 0, ran.stderr
    env = EnvironmentRegistry(fixture_envs).get("counter")
    expected_hash = env.content_hash("tiny")

    code, out, err = run_main(["--version"], capsys)
    assert code == 0 and out.strip() == f"rebench {rebench_version()}"
    code, out, err = run_main(["attempts", "show", "1", "--json", "--db", str(db)], capsys)
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["rebench_version"], shown["env_hash"]) == (rebench_version(), expected_hash)
    assert shown["generated_by"] == {"rebench_version": rebench_version()}
    code, out, _ = run_main(["attempts", "list", "--json", "--db", str(db)], capsys)
    (row,) = json.loads(out)
    assert (row["rebench_version"], row["env_hash"]) == (rebench_version(), expected_hash)
    code, out, _ = run_main(["attempts", "show", "1", "--db", str(db)], capsys)
    assert f"ran on rebench {rebench_version()}, counter" in out and expected_hash in out
    code, out, _ = run_main(["envs", "show", "counter", "--json"], capsys)
    assert json.loads(out)["content_hashes"]["tiny"] == expected_hash

    # the hash follows the folder: an edited environment is a different environment
    (fixture_envs / "counter" / "instructions.md").write_text("changed\n")
    assert EnvironmentRegistry(fixture_envs).get("counter").content_hash("tiny") != expected_hash

    code, out, err = run_main(["export", "inspect", "--out", str(tmp_path / "logs"), "--db", str(db)], capsys)
    assert code == 0, err
    from inspect_ai.log import read_eval_log

    (path,) = (tmp_path / "logs").glob("*.eval")
    log = read_eval_log(str(path))
    assert log.eval.packages["rebench"] == rebench_version()
    assert log.eval.metadata is not None and log.eval.metadata["rebench"]["env_hashes"] == [expected_hash]
    assert log.samples is not None and log.samples[0].metadata["env_hash"] == expected_hash

    code, out, err = run_main(["report", "--out", str(tmp_path / "report"), "--db", str(db)], capsys)
    assert code == 0, err
    assert f"rebench {rebench_version()}" in (tmp_path / "report" / "report.md").read_text()
