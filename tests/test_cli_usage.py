"""The command line a new user meets: usage errors, help, start-up imports, tables that keep names whole."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from rebench.cli.app import SUBCOMMANDS, load_subcommand
from rebench.tables import Col, print_table
from tests.conftest import run_main

REPO = Path(__file__).resolve().parents[1]


# One bad-usage call per command (and group): each must say what is wrong in one line, exit 2.
BAD_USAGE = [
    (["run", "--env", "triton_cumsum"], "--agent"),
    (["run", "--env", "triton_cumsum", "--agent", "reference", "--budget", "1h", "-k", "many"], "-k"),
    (["run", "--env", "triton_cumsum", "--agent", "reference", "--budget", "1h", "--parallel", "0"], "--parallel"),
    (["report", "--n-bootstrap", "lots"], "--n-bootstrap"),
    (["report", "--no-such-flag"], "--no-such-flag"),
    (["envs", "show"], "name"),
    (["envs", "list", "--bogus"], "--bogus"),
    (["envs", "build", "triton_cumsum", "--profile"], "--profile"),
    (["envs", "calibrate", "triton_cumsum", "--repeats", "0"], "--repeats"),
    (["envs", "frobnicate"], "frobnicate"),
    (["attempts", "show", "seven"], "attempt_id"),
    (["attempts", "list", "--limit", "0"], "--limit"),
    (["import", "metr-runs"], "path"),
    (["import", "other-runs", "x.jsonl"], "other-runs"),
    (["images", "bootstrap", "--suite"], "--suite"),
    (["images", "list", "--bogus"], "--bogus"),
    (["gc", "--bogus"], "--bogus"),
    (["nonsense"], "nonsense"),
    (["envs", "show", "[bogus]"], "'[bogus]'"),  # the harness's own errors: one line too, markup-like text kept
]


@pytest.mark.parametrize(("argv", "named"), BAD_USAGE, ids=[" ".join(a) for a, _ in BAD_USAGE])
def test_bad_usage_is_one_line_and_status_2(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(argv, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and named in lines[0], lines[0]
    assert "Traceback" not in err + out


def test_group_without_subcommand_shows_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["envs"], capsys)
    assert code == 2  # Click's rule for a group called without a command
    assert "calibrate" in out + err and "error:" not in err


def test_declared_help_matches_each_command() -> None:
    """`rebench --help` shows help declared in app.py without importing the module; it must not drift."""
    for name, spec in SUBCOMMANDS.items():
        command = load_subcommand(name)
        assert command.name == name
        assert command.help is not None, name
        assert command.help.strip().splitlines()[0] == spec.help, name


def test_every_subcommand_help_works(capsys: pytest.CaptureFixture[str]) -> None:
    for name in SUBCOMMANDS:
        code, out, _ = run_main([name, "--help"], capsys)
        assert code == 0 and "Usage" in out, name


def test_top_level_help_imports_no_heavy_module() -> None:
    """Start-up cost: the listing must not load the database layer, NumPy, pandas or the report code."""
    probe = (
        "import sys\n"
        "from rebench.cli.app import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = ['sqlalchemy', 'numpy', 'pandas', 'rebench.report', 'rebench.store', 'pydantic']\n"
        "print('LOADED=' + ','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60,
                          check=True)
    assert "LOADED=\n" in done.stdout, done.stdout[-300:]
    for name in SUBCOMMANDS:
        assert name in done.stdout



def test_a_read_only_command_loads_neither_the_gateway_server_nor_alembic(tmp_path: Path) -> None:
    """Start-up cost of `rebench attempts list`: reading a database at the newest schema must not load
    the model gateway's server (rebench.gateway is lazy), the agents (rebench.agents is lazy) or
    Alembic (rebench.store.schema.HEAD_REVISION). `report` still does, through rebench.api."""
    from rebench.store.db import Store

    db = tmp_path / "r.db"
    Store(db).close()  # made at the newest schema, in this process
    probe = (
        "import sys\n"
        "from rebench.cli.app import main\n"
        f"try:\n    main(['attempts', 'list', '--db', {str(db)!r}])\nexcept SystemExit:\n    pass\n"
        "heavy = ['rebench.gateway.server', 'rebench.agents.base', 'alembic']\n"
        "print('LOADED=' + ','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120,
                          check=True)
    assert "Attempts" in done.stdout, done.stdout[-300:] + done.stderr[-300:]
    assert "LOADED=\n" in done.stdout, done.stdout[-300:]

def _envs_list(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(env_extra)
    done = subprocess.run([sys.executable, "-m", "rebench.cli.app", "envs", "list"], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120, check=True)
    return done.stdout


@pytest.mark.parametrize("columns", ["80", None], ids=["width-80", "pipe"])
def test_envs_list_keeps_names_whole(columns: str | None) -> None:
    out = _envs_list({"COLUMNS": columns} if columns else {})
    names = json.loads(subprocess.run([sys.executable, "-m", "rebench.cli.app", "envs", "list", "--json"],
                                      capture_output=True, text=True, cwd=REPO, check=True, timeout=120).stdout)
    assert names
    table_lines = [line for line in out.splitlines() if line.startswith("│")]
    first_cells = {line.split("│")[1].strip() for line in table_lines} - {""}
    profiles = {line.split("│")[2].strip() for line in table_lines} - {""}
    assert first_cells == {row["environment"] for row in names}
    assert profiles == {row["profile"] for row in names}
    assert all(len(line) <= 80 for line in out.splitlines()), max(len(line) for line in out.splitlines())
    assert "…" not in out


def _render(columns: list[Col], rows: list[list[str]], width: int) -> str:
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=width), "t", columns, rows, more="--json")
    return buffer.getvalue()


def test_narrow_table_drops_descriptive_columns_from_the_right() -> None:
    columns = [Col("attempt", key=True), Col("agent", key=True), Col("note"), Col("detail")]
    rows = [["1042", "modular-claude-sonnet", "a note that wraps", "unbreakable_" * 4]]
    wide = _render(columns, rows, 200)
    assert "unbreakable_" * 4 in wide and "left out" not in wide
    narrow = _render(columns, rows, 60)
    assert "modular-claude-sonnet" in narrow and "1042" in narrow
    assert "detail" not in narrow.splitlines()[2]
    assert "left out to fit 60 columns: detail; --json shows them" in " ".join(narrow.split())
    assert all(len(line) <= 60 for line in narrow.splitlines())


def test_keys_wider_than_the_terminal_are_printed_whole() -> None:
    columns = [Col("environment", key=True), Col("title")]
    name = "an_environment_name_longer_than_the_terminal"
    out = _render(columns, [[name, "Title"]], 30)
    assert name in out and "…" not in out
    assert "left out to fit 30 columns: title" in " ".join(out.split())


def test_envs_list_without_environments_says_where_it_looked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(tmp_path / "missing"))
    code, _, err = run_main(["envs", "list"], capsys)
    assert code == 2 and f"no environments in {tmp_path / 'missing'}" in " ".join(err.split())


@pytest.mark.parametrize("args, expected", [
    (["--gpus", "0"], "--gpus 0: the tiny profile of counter needs no GPU; leave --gpus out"),
    (["--gpus", ""], "invalid --gpus '': name at least one device id"),
    (["--gpus", ","], "invalid --gpus ',': name at least one device id"),
    (["--agent-arg", "repeat=5"], "unknown --agent-arg 'repeat' for reference; allowed: repeats"),
    (["--ray-address", "10.0.0.1:6379"], "--ray-address '10.0.0.1:6379' is used only with --executor ray"),
])
def test_options_that_would_be_ignored_are_refused(args: list[str], expected: str, fixture_envs: Path,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of these used to run the campaign as if the option had not been given."""
    db = tmp_path / "r.db"
    code, _, err = run_main(["run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                             "--db", str(db), *args], capsys)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists()


def test_run_help_names_the_ray_extra() -> None:
    """Rich markup used to swallow `[ray]`, leaving `pip install 'rebench'` in the help."""
    result = subprocess.run([sys.executable, "-m", "rebench.cli.app", "run", "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "250"}, cwd=REPO)
    assert "rebench[ray]" in result.stdout, result.stdout
