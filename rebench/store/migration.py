"""Running the migrations: Alembic, loaded only when a database is older than this rebench (or a file
someone left empty); a new one is made from the head schema (rebench.store.head_schema)."""

from __future__ import annotations

from sqlalchemy import Engine

from rebench.store.schema import MIGRATIONS_DIR


def migrate(engine: Engine) -> None:
    """Run the migrations up to head on the engine's database, in one transaction."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
