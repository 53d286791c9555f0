"""Opening the database: SQLite in WAL mode, schema brought to head by Alembic."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.orm import Session, sessionmaker

from rebench.errors import RebenchError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def default_db_path() -> Path:
    """`REBENCH_DB` if set, else `results/rebench.db` under the current directory."""
    return Path(os.environ.get("REBENCH_DB", "results/rebench.db"))


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    """WAL with synchronous=FULL: a committed transaction survives a crash of the harness and
    a power loss. (NORMAL would survive the former only, losing the last commits to the latter;
    it is not needed since tool-call events are committed in batches off the hot path, see
    rebench.context.AttemptRecorder, and only scores and status changes commit inline.)"""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class Store:
    """A handle on one database file; `session()` gives a transaction that commits or rolls back whole."""

    def __init__(self, path: Path | str | None = None, *, migrate: bool = True) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if self.path.exists() and self.path.is_dir():
            raise RebenchError(f"database path {str(self.path)!r} is a directory; give a file path")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RebenchError(f"cannot create the database folder {str(self.path.parent)!r}: {exc}") from None
        self._check_sqlite_file()
        self.engine = create_engine(f"sqlite:///{self.path}", future=True)
        event.listen(self.engine, "connect", _on_connect)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            _upgrade(self.engine)

    def _check_sqlite_file(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb") as handle:
            header = handle.read(16)
        if header != b"SQLite format 3\x00":
            raise RebenchError(f"{str(self.path)!r} is not a SQLite database; pass another --db path")

    @contextmanager
    def session(self) -> Iterator[Session]:
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def tables(self) -> list[str]:
        return sorted(inspect(self.engine).get_table_names())

    def close(self) -> None:
        self.engine.dispose()


def integrity_ok(path: Path) -> bool:
    """`PRAGMA integrity_check` on a database file (used by tests after crashes)."""
    with sqlite3.connect(path) as connection:
        return connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
