"""Opening the database: SQLite in WAL mode; read-only for commands that only read, made new from
the head schema, and brought to this rebench's schema by Alembic only for commands that write,
after a backup."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.orm import Session, sessionmaker

from rebench.errors import RebenchError
from rebench.store.migration import migrate
from rebench.store.schema import FileKind, backup, backup_path, head_revision, inspect_file


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


def _on_connect_read_only(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _say(line: str) -> None:
    print(line, file=sys.stderr)


class Store:
    """A handle on one database file; `session()` gives a transaction that commits or rolls back whole.

    `read_only`: the file must exist at this rebench's schema and is opened read-only (SQLite's
    `mode=ro`): listing, showing and reporting never change a shared database, and never upgrade
    it behind its other users' backs. Otherwise (commands that write) a missing file is created
    at this schema, and an older one is first copied beside itself (`X.bak-<revision>`), then
    upgraded, with one line to `on_upgrade`. A file from a newer rebench, a damaged one, or
    someone else's SQLite file is refused in one line either way, and is left byte for byte as it was.
    """

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False,
                 on_upgrade: Callable[[str], None] = _say) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        state = inspect_file(self.path)
        problem = state.problem()
        if problem:
            raise RebenchError(problem)
        if read_only:
            if state.kind is FileKind.MISSING:
                raise RebenchError(f"no rebench database at {self.path} (pass --db PATH, or set REBENCH_DB)")
            if state.kind is FileKind.OLDER:
                raise RebenchError(state.needs_upgrade())
            uri = f"file:{self.path.resolve()}?mode=ro"
            self.engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(
                uri, uri=True, check_same_thread=False), future=True)
            event.listen(self.engine, "connect", _on_connect_read_only)
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RebenchError(f"cannot create the database folder {str(self.path.parent)!r}: {exc}") from None
            from rebench.store import head_schema

            if state.kind is FileKind.MISSING and head_schema.create(self.path):
                state = inspect_file(self.path)
            self.engine = create_engine(f"sqlite:///{self.path}", future=True)
            event.listen(self.engine, "connect", _on_connect)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if state.kind is FileKind.MISSING:
            migrate(self.engine)
        elif state.kind is FileKind.OLDER and not read_only:
            kept = backup(self.path, backup_path(state))
            migrate(self.engine)
            on_upgrade(f"upgraded database {self.path} from schema {state.revision} to {head_revision()}; "
                       f"the file as it was is kept as {kept}")
        if not read_only:
            self._record_snapshots_dir()

    def _recorded_snapshots_dir(self) -> str | None:
        from rebench.store.models import StoreSetting

        with self.session() as session:
            row = session.get(StoreSetting, "snapshots_dir")
            return row.value if row is not None else None

    def _record_snapshots_dir(self) -> None:
        from rebench.store.models import StoreSetting

        if self._recorded_snapshots_dir() is None:
            with self.session() as session:
                session.add(StoreSetting(key="snapshots_dir", value=f"{self.path.name}-snapshots"))

    @property
    def snapshots_dir(self) -> Path:
        """This database's snapshot folder, beside it; recorded in it, so each database has its own."""
        recorded = self._recorded_snapshots_dir() or f"{self.path.name}-snapshots"
        return self.path.parent / recorded

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
