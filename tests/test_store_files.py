"""The results database never surprises: read-only commands never create, migrate or change it;
commands that write upgrade an older one only after a backup; a newer, damaged or foreign file
gets one line and stays byte for byte as it was. Real SQLite files, the real CLI."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from rebench.errors import RebenchError
from rebench.store.db import Store
from rebench.store.schema import HEAD_REVISION, head_revision, revisions

from .conftest import REPO, run_cli, run_main

READ_ONLY = [["attempts", "list"], ["campaigns", "list"], ["report"], ["human", "list"]]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dump(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return list(connection.iterdump())


def _older_database(path: Path, revision: str | None = None) -> str:
    """A real rebench database at the schema before this one, made by running the migrations up to it."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from rebench.store.schema import MIGRATIONS_DIR

    previous = revision or revisions()[-2]
    engine = create_engine(f"sqlite:///{path}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, previous)
    engine.dispose()
    return previous


def _newer_database(path: Path) -> None:
    Store(path).close()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE alembic_version SET version_num = '0042'")


def _foreign_database(path: Path) -> None:
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.execute("CREATE TABLE tags (name TEXT)")


def _add_attempts(path: Path, n: int) -> None:
    """Rows written with plain SQL, so a database at an older schema stays at it."""
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany(
            "INSERT INTO attempts (source, environment, env_version, profile, agent, budget_s, seed, status, counted,"
            " created_at, wall_s, working_s, model_wait_s, input_tokens, output_tokens, cached_tokens, cost_usd,"
            " submitted, error_message) VALUES ('own', 'counter', '1', 'tiny', 'reference', 60, 0, 'done', 1,"
            " '2026-01-01', 0, 0, 0, 0, 0, 0, 0, 1, ?)", [("x" * 500,) for _ in range(n)])


def _damaged_database(path: Path) -> None:
    Store(path).close()
    _add_attempts(path, 400)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("make, expected", [
    (_newer_database, "was made by a newer rebench (schema 0042"),
    (_foreign_database, "is not a rebench database (it has tables notes, tags)"),
    (_damaged_database, "is damaged: "),
])
def test_a_file_this_rebench_must_not_touch_gets_one_line_and_stays_unchanged(
        make, expected: str, tmp_path: Path, fixture_envs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every read-only command and `run`; the read-only ones in this process (the real entry point)."""
    db = tmp_path / "shared.db"
    make(db)
    before = _digest(db)
    outcomes = [run_main([*command, "--db", str(db)], capsys) for command in READ_ONLY]
    ran = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                  "--db", str(db), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    outcomes.append((ran.returncode, ran.stdout, ran.stderr))
    for code, out, err in outcomes:
        assert code == 2, out + err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0] and "Traceback" not in err, err
    assert "creating virtualenv" not in ran.stderr  # refused before anything was built
    assert _digest(db) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith("-snapshots") or ".bak-" in p.name]

@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_refuse_an_older_database_without_migrating_it(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "old.db"
    previous = _older_database(db)
    before = _digest(db)
    code, _, err = run_main([*command, "--db", str(db)], capsys)
    assert code == 2
    assert err.strip() == (f"error: database {db} is at schema {previous}, this rebench needs "
                           f"{head_revision()}: run 'rebench db upgrade {db}' (back it up first)")
    assert _digest(db) == before


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_refuse_a_missing_database_and_create_nothing(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "typo" / "rebench.db"
    code, _, err = run_main([*command, "--db", str(db)], capsys)
    assert code == 2
    assert str(db) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "typo").exists()


def test_a_writing_command_backs_up_an_older_database_then_upgrades_it(tmp_path: Path, fixture_envs: Path) -> None:
    db = tmp_path / "old.db"
    previous = _older_database(db)
    before_rows = _dump(db)
    result = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                     "--db", str(db), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert result.returncode == 0, result.stderr
    backup = tmp_path / f"old.db.bak-{previous}"
    assert f"upgraded database {db} from schema {previous} to {head_revision()}" in result.stderr
    assert f"kept as {backup}" in result.stderr
    assert _dump(backup) == before_rows  # SQLite's online backup: the same content, not the same bytes
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision()
        assert connection.execute("SELECT count(*) FROM attempts").fetchone()[0] == 1


def test_db_check_backup_and_upgrade(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    previous = _older_database(db)
    before_rows = _dump(db)
    check = run_cli("db", "check", str(db))
    assert check.returncode == 2 and f"is at schema {previous}" in check.stderr
    copy = run_cli("db", "backup", str(db), "--out", str(tmp_path / "copy.db"))
    assert copy.returncode == 0, copy.stderr
    assert run_cli("db", "backup", str(db), "--out", str(tmp_path / "copy.db")).returncode == 2  # never overwrites
    upgrade = run_cli("db", "upgrade", str(db))
    assert upgrade.returncode == 0, upgrade.stderr
    assert _dump(tmp_path / f"old.db.bak-{previous}") == before_rows
    assert run_cli("db", "check", str(db)).returncode == 0
    again = run_cli("db", "upgrade", str(db))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    with sqlite3.connect(tmp_path / "copy.db") as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0] == previous


def test_each_database_has_its_own_snapshot_folder(tmp_path: Path, fixture_envs: Path) -> None:
    """Two databases in one folder used to share `snapshots/attempt-1`."""
    for name in ("a.db", "b.db"):
        result = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                         "--db", str(tmp_path / name), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
        assert result.returncode == 0, result.stderr
    for name in ("a.db", "b.db"):
        with sqlite3.connect(tmp_path / name) as connection:
            (snapshot,), = connection.execute("SELECT snapshot_path FROM attempts").fetchall()
        assert Path(snapshot).is_relative_to(tmp_path / f"{name}-snapshots")
    assert not (tmp_path / "snapshots").exists()


def test_an_upgraded_database_keeps_the_snapshot_folder_its_attempts_use(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _older_database(db, "0007")  # before databases recorded their snapshot folder
    _add_attempts(db, 1)
    store = Store(db, on_upgrade=lambda line: None)
    assert store.snapshots_dir == tmp_path / "snapshots"
    assert Store(tmp_path / "new.db").snapshots_dir == tmp_path / "new.db-snapshots"


def test_store_refuses_in_process_too(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    _foreign_database(db)
    with pytest.raises(RebenchError, match="not a rebench database"):
        Store(db)
    with pytest.raises(RebenchError, match="no rebench database at"):
        Store(tmp_path / "missing.db", read_only=True)


def test_the_head_revision_known_without_alembic_is_alembics_head() -> None:
    """A database at HEAD_REVISION is taken as current without reading the migrations: a new
    migration must move the constant too, or an older database would pass for a current one."""
    assert HEAD_REVISION == head_revision() == revisions()[-1]


def test_a_database_at_head_opens_without_alembic(tmp_path: Path) -> None:
    """Making a new database and opening a current one (to write, and read-only) load no Alembic
    (about 0.35 s of every command): a new one is made from the head schema's script."""
    db = tmp_path / "x.db"
    probe = ("import sys\nfrom rebench.store.db import Store\n"
             f"Store({str(db)!r}).close()\n"
             "print('alembic' in sys.modules)\n"
             f"Store({str(db)!r}).close()\nStore({str(db)!r}, read_only=True).close()\n"
             "print('alembic' in sys.modules)\n")
    made = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert made.stdout.split() == ["False", "False"], made.stderr
    opened = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert opened.stdout.split() == ["False", "False"], opened.stderr


def _schema(path: Path) -> list[tuple[str, ...]]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        return sorted(connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()) + [
            tuple(row) for row in connection.execute("SELECT version_num FROM alembic_version")]


def test_a_new_database_has_the_schema_the_migrations_make(tmp_path: Path) -> None:
    """The committed script is what the migrations make today (a new migration without a new script
    fails here), and a database made from it is the migrations' own, object for object, in WAL mode."""
    from sqlalchemy import create_engine

    from rebench.store import head_schema
    from rebench.store.migration import migrate

    assert head_schema.SCRIPT.read_text(encoding="utf-8") == head_schema.render(), (
        "rebench/store/head_schema.sql is stale: run `python -m rebench.store.head_schema`")
    migrated = tmp_path / "migrated.db"
    engine = create_engine(f"sqlite:///{migrated}", future=True)
    migrate(engine)
    engine.dispose()
    made = tmp_path / "made.db"
    Store(made).close()
    assert _schema(made) == _schema(migrated)
    with closing(sqlite3.connect(made)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []  # no build left


def test_a_new_database_is_made_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that fails halfway leaves no file at the path (the next command makes it anew), and a
    file someone else made meanwhile is left as it is."""
    from rebench.store import head_schema

    broken = tmp_path / "broken.sql"
    broken.write_text(head_schema.SCRIPT.read_text(encoding="utf-8") + "CREATE TABLE attempts (id INTEGER);\n")
    monkeypatch.setattr(head_schema, "SCRIPT", broken)
    target = tmp_path / "half.db"
    refused = re.escape(f"cannot create the database {str(target)!r}: ") + ".*already exists"
    with pytest.raises(RebenchError, match=refused):
        head_schema.create(target)
    assert list(tmp_path.iterdir()) == [broken]

    monkeypatch.undo()
    other = tmp_path / "other.db"
    other.write_bytes(b"")
    assert head_schema.create(other) is False and other.read_bytes() == b""
    Store(other).close()  # an empty file is still a new database: the migrations make it
    assert _schema(other) == _schema(_made(tmp_path / "fresh.db"))


def test_a_file_system_without_hard_links_gets_its_database_from_the_migrations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some network and FAT file systems refuse hard links (a stand-in os.link here, as no such
    file system can be mounted on this machine): the script's build is dropped and the migrations
    make the same database in place, with nothing else left in the folder."""
    from rebench.store import head_schema

    def refuse(source: object, target: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(head_schema.os, "link", refuse)
    made = tmp_path / "nolinks.db"
    assert head_schema.create(made) is False and not made.exists()
    Store(made).close()
    monkeypatch.undo()
    assert _schema(made) == _schema(_made(tmp_path / "fresh.db"))
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_a_database_where_no_file_can_be_made_is_one_line_naming_it(fixture_envs: Path) -> None:
    """A folder that takes no new file (here /proc, even for root) is refused in one line naming the
    path, through the CLI too, not a traceback."""
    with pytest.raises(RebenchError, match=re.escape("cannot create the database '/proc/rebench.db': unable to open")):
        Store(Path("/proc/rebench.db"))
    result = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--backend", "local",
                     "--db", "/proc/rebench.db")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert "cannot create the database '/proc/rebench.db'" in result.stderr, result.stderr


def _made(path: Path) -> Path:
    Store(path).close()
    return path
