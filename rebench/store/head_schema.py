"""A new database is made from one SQL script, the schema the migrations end at, instead of by
running every migration: Alembic loads and reads each migration file, which cost each command that
makes a database about 0.35 CPU-s (most `rebench run`s in a fresh folder, and hundreds in the
tests). Rails' `db:schema:load` works the same way. Existing databases are still upgraded by the
migrations (rebench.store.db).

The script (head_schema.sql, beside this file) is written by `python -m rebench.store.head_schema`
from a database the migrations made; tests/test_store_files.py checks it is exactly that, so a new
migration without a new script fails the tests."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from pathlib import Path

from rebench.errors import RebenchError

SCRIPT = Path(__file__).with_name("head_schema.sql")
_HEADER = ("-- The schema rebench's migrations end at, as SQLite stores it; a new database is made from it.\n"
           "-- Written by `python -m rebench.store.head_schema`: do not edit.\n")


def schema_of(connection: sqlite3.Connection) -> list[str]:
    """A database's schema as SQL statements: its tables in the order they were made, then the
    indexes by name (a migration that rebuilds a table makes its indexes again in no fixed order),
    then its revision. SQLite's own objects, such as sqlite_sequence, are made by these."""
    rows = connection.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        " ORDER BY type != 'table', CASE WHEN type = 'table' THEN rowid END, name").fetchall()
    revisions = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    return [str(sql) for (sql,) in rows] + [
        f"INSERT INTO alembic_version (version_num) VALUES ('{version}')" for (version,) in revisions]


def render() -> str:
    """The script, from a new database made by running every migration."""
    from sqlalchemy import create_engine

    from rebench.store.migration import migrate

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "head.db"
        engine = create_engine(f"sqlite:///{path}", future=True)
        try:
            migrate(engine)
        finally:
            engine.dispose()
        connection = sqlite3.connect(path)
        try:
            statements = schema_of(connection)
        finally:
            connection.close()
    return _HEADER + "".join(f"{statement};\n" for statement in statements)


def create(path: Path) -> bool:
    """Make a new database at `path` from the script, whole or not at all: it is built under another
    name in the same folder and linked into place. False, with nothing changed, when a file is
    already at `path` (an empty one, or one another process made meanwhile) or the file system
    makes no hard links: the caller migrates the file at `path`. A folder that takes no new file,
    or a script that fails (a full disk), is a RebenchError naming the path."""
    if path.exists():
        return False
    building = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    try:
        try:  # SQLite makes the file with the umask's mode, as it would at `path`
            connection = sqlite3.connect(building)
            try:
                connection.execute("PRAGMA journal_mode=WAL")  # kept in the file, as the Store's connections set it
                connection.executescript(f"BEGIN;\n{SCRIPT.read_text(encoding='utf-8')}COMMIT;\n")
            finally:
                connection.close()
        except sqlite3.Error as exc:  # no new file here (/proc, read-only), or the script failed
            raise RebenchError(f"cannot create the database {str(path)!r}: {exc}") from None
        try:
            os.link(building, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links on this file system: the migrations make it in place
            return False
        return True
    finally:
        for suffix in ("", "-wal", "-shm"):
            building.with_name(building.name + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    SCRIPT.write_text(render(), encoding="utf-8")
    print(f"wrote {SCRIPT}")
