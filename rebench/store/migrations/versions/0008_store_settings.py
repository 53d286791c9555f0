"""Settings of the database itself, beginning with where its snapshots live: each database owns
a snapshot folder named after its file (`rebench.db-snapshots/` beside `rebench.db`), so two
databases in one folder no longer share `snapshots/`. A database that already has attempts keeps
the folder its snapshots are in (`snapshots`).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    settings = op.create_table(
        "store_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    has_attempts = op.get_bind().execute(sa.text("SELECT count(*) FROM attempts")).scalar()
    if has_attempts:
        op.bulk_insert(settings, [{"key": "snapshots_dir", "value": "snapshots"}])


def downgrade() -> None:
    op.drop_table("store_settings")
