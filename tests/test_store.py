import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.errors import RebenchError
from rebench.store.db import Store, integrity_ok
from rebench.store.models import Attempt, Campaign
from rebench.store.schema import MIGRATIONS_DIR

from .conftest import run_cli


def _head_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_migration_creates_schema_in_wal_mode(db_path: Path) -> None:
    store = Store(db_path)
    assert {"campaigns", "attempts", "events", "score_events", "pauses", "calibrations"} <= set(store.tables())
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("pragma journal_mode").fetchone()[0] == "wal"
        assert connection.execute("select version_num from alembic_version").fetchone()[0] == _head_revision()
    Store(db_path)  # opening again is a no-op upgrade
    assert integrity_ok(db_path)


def test_failed_transaction_leaves_nothing(db_path: Path) -> None:
    store = Store(db_path)
    with pytest.raises(RuntimeError), store.session() as session:
        session.add(Campaign(spec={}, status="running"))
        session.flush()
        session.add(Attempt(environment="x", agent="a", budget_s=1.0))
        raise RuntimeError("boom")
    with store.session() as session:
        assert session.query(Campaign).count() == 0 and session.query(Attempt).count() == 0


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello, this is not sqlite")
    with pytest.raises(RebenchError, match="is not a SQLite database"):
        Store(bogus)
    assert bogus.read_text() == "hello, this is not sqlite"


def test_db_path_from_environment_variable(tmp_path: Path) -> None:
    target = tmp_path / "from-env.db"
    missing = run_cli("attempts", "list", "--json", env={"REBENCH_DB": str(target)})
    assert missing.returncode == 2 and str(target) in missing.stderr and not target.exists()
    Store(target).close()
    result = run_cli("attempts", "list", "--json", env={"REBENCH_DB": str(target)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_opening_the_database_again_in_a_process_keeps_that_process_s_locks(db_path: Path) -> None:
    """SQLite's locks are POSIX record locks, which any close() of the file in the same process drops.
    A second Store in a process that already holds the file (parallel attempts do this) must not open
    the file outside SQLite: if it did, another process closing its last connection would see no
    other user, checkpoint and delete the write-ahead log under this one, and the database would be
    reported malformed (seen as two `rebench run` processes sharing one database)."""
    first = Store(db_path)
    held = first.engine.raw_connection()  # a connection that stays open, as a running attempt's does
    try:
        held.execute("select count(*) from attempts").fetchone()
        Store(db_path).close()  # the second open in this process
        other = ("import sqlite3, sys\n"
                 "c = sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=wal')\n"
                 "c.execute(\"insert into store_settings (key, value) values ('probe', '1')\")\n"
                 "c.commit(); c.close()\n")
        subprocess.run([sys.executable, "-c", other, str(db_path)], check=True, timeout=60)
        # the other process saw this one still holding the file: it left the log in place
        assert Path(f"{db_path}-wal").exists()
        assert held.execute("select value from store_settings where key = 'probe'").fetchone()[0] == "1"
    finally:
        held.close()
        first.close()
    assert integrity_ok(db_path)
