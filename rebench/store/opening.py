"""Opening the database for one call: a Store passed in stays open, one opened here is closed here;
a database this rebench must not touch is refused before anything else runs. rebench.api re-exports
`open_store` and `using_store`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rebench.store.db import Store


def open_store(db: Store | Path | str | None = None) -> Store:
    """The database at `db` (created and migrated when new); None: $REBENCH_DB or results/rebench.db."""
    from rebench.store.db import Store

    return db if isinstance(db, Store) else Store(db)


@contextmanager
def using_store(db: Store | Path | str | None, *, read_only: bool = False) -> Iterator[Store]:
    """A store for one call: one passed in stays open, one opened here is closed here (read-only
    for calls that only read: they never create or upgrade a database)."""
    from rebench.store.db import Store

    if isinstance(db, Store):
        yield db
        return
    store = Store(db, read_only=read_only)
    try:
        yield store
    finally:
        store.close()


def check_database(db: Store | Path | str | None) -> None:
    """A database this rebench must not touch (newer, damaged, foreign) is refused before minutes of building."""
    from rebench.errors import RebenchError
    from rebench.store.db import Store, default_db_path
    from rebench.store.schema import inspect_file

    if not isinstance(db, Store):
        problem = inspect_file(Path(db) if db is not None else default_db_path()).problem()
        if problem:
            raise RebenchError(problem)


@contextmanager
def store_if_any(db: Store | Path | str | None) -> Iterator[Store | None]:
    """For what the declarations answer without a database: a read-only store, or None when the
    database does not exist yet (nothing is measured, and nothing is created by asking)."""
    from rebench.store.db import Store, default_db_path

    if not isinstance(db, Store) and not (Path(db) if db is not None else default_db_path()).exists():
        yield None
        return
    with using_store(db, read_only=True) as store:
        yield store
