"""attempts.snapshot_note: what an attempt's snapshot left out.

Snapshots are capped per profile and skip special files and links out of the solution
folder; the attempt row says so in one line (the `snapshot` event has the details).
Existing attempts were copied without a cap and get NULL.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("snapshot_note", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("snapshot_note")
