"""Alembic environment: migrations run on the connection the Store hands over."""

from alembic import context

from rebench.store.models import Base

target_metadata = Base.metadata
connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` command line: build an engine from the URL option
    from sqlalchemy import create_engine

    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "sqlite:///results/rebench.db")
    with engine.begin() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
