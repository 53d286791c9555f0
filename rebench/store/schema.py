"""What a database file is, read without writing a byte to it: a rebench database at some schema
revision, one from a newer rebench, a damaged file, or someone else's SQLite file.

Results databases are shared by teams and kept for years, so nothing here migrates, creates or
repairs anything; `Store` decides what to do with the answer (rebench.store.db), and
`rebench db` shows it (rebench.cli.db).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

from rebench.errors import RebenchError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
HEAD_REVISION = "0013"
"""The newest schema revision, known without loading Alembic, which reads every migration (about
0.3 s of each command that opens a database); tests/test_store_files.py checks it is Alembic's head."""


class FileKind(StrEnum):
    MISSING = "missing"  # no file, or an empty one: a new database may be made there
    CURRENT = "current"  # a rebench database at this rebench's schema
    OLDER = "older"  # a rebench database that `rebench db upgrade` brings to this schema
    NEWER = "newer"  # made by a newer rebench: this one must not touch it
    FOREIGN = "foreign"  # a SQLite file without rebench's schema, or not SQLite at all
    DAMAGED = "damaged"  # SQLite cannot read it


@dataclass(frozen=True)
class FileState:
    path: Path
    kind: FileKind
    revision: str | None = None  # the file's schema revision, when it has one
    detail: str = ""  # the damage, or the foreign file's tables

    def problem(self) -> str | None:
        """One line for a file no command may open as it is; None for MISSING, CURRENT and OLDER."""
        where = str(self.path)
        if self.kind is FileKind.NEWER:
            return (f"database {where} was made by a newer rebench (schema {self.revision}; this rebench knows up "
                    f"to {head_revision()}): upgrade rebench to read it")
        if self.kind is FileKind.DAMAGED:
            return f"database {where} is damaged: {self.detail} (run 'sqlite3 {where} .recover' into a new file)"
        if self.kind is FileKind.FOREIGN:
            return f"{where} is not a rebench database ({self.detail}); pass another --db path"
        return None

    def needs_upgrade(self) -> str:
        return (f"database {self.path} is at schema {self.revision}, this rebench needs {head_revision()}: "
                f"run 'rebench db upgrade {self.path}' (back it up first)")


@cache
def revisions() -> tuple[str, ...]:
    """This rebench's schema revisions, oldest first, as Alembic reads them from the migrations."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    newest_first = [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()]
    return tuple(reversed(newest_first))


def head_revision() -> str:
    return revisions()[-1]


def inspect_file(path: Path) -> FileState:
    """Classify `path` through a read-only connection; the file is left byte for byte as it was."""
    if path.is_dir():
        raise RebenchError(f"database path {str(path)!r} is a directory; give a file path")
    if not path.exists() or path.stat().st_size == 0:
        return FileState(path, FileKind.MISSING)
    # The header is read by SQLite, never by open(): closing any descriptor of the file drops every
    # POSIX lock this process holds on it, and another Store in this process may be holding them.
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            versions = (connection.execute("SELECT version_num FROM alembic_version").fetchall()
                        if "alembic_version" in tables else [])
            if "attempts" in tables:  # reads the attempts table's pages: a truncated file fails here
                connection.execute("SELECT count(*), max(id) FROM attempts").fetchone()
        finally:
            connection.close()
    except sqlite3.DatabaseError as exc:
        if str(exc) == "file is not a database":  # SQLite's word for a file without its header
            return FileState(path, FileKind.FOREIGN, detail="it is not a SQLite database")
        return FileState(path, FileKind.DAMAGED, detail=str(exc))
    if not tables:
        return FileState(path, FileKind.MISSING)
    if "alembic_version" not in tables or "attempts" not in tables or len(versions) != 1:
        shown = ", ".join(tables[:8]) + (f" and {len(tables) - 8} more" if len(tables) > 8 else "")
        return FileState(path, FileKind.FOREIGN, detail=f"it has tables {shown}")
    revision = str(versions[0][0])
    if revision == HEAD_REVISION:
        return FileState(path, FileKind.CURRENT, revision)
    known = revisions()
    if revision == known[-1]:
        return FileState(path, FileKind.CURRENT, revision)
    if revision in known:
        return FileState(path, FileKind.OLDER, revision)
    return FileState(path, FileKind.NEWER, revision)


def backup(path: Path, target: Path) -> Path:
    """A consistent copy of the database at `target` (SQLite's online backup: safe while others write)."""
    if target.exists():
        raise RebenchError(f"backup file {target} already exists; move it away or name another one")
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    except sqlite3.DatabaseError as exc:
        target.unlink(missing_ok=True)
        raise RebenchError(f"backing up {path} to {target} failed: {exc}") from None
    finally:
        source.close()
    return target


def backup_path(state: FileState) -> Path:
    """Where an upgrade keeps the file as it was: beside it, named after its schema revision."""
    return state.path.with_name(f"{state.path.name}.bak-{state.revision}")
