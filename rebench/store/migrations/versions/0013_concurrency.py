"""What bounds a campaign's attempts at once (`campaigns.concurrency`: the line `rebench run` says
before the first attempt starts) and what each queued attempt waits for (`attempts.waiting_for`:
CPUs, memory, GPUs, a --parallel slot), so every terminal that reads the store shows them.
NULL on rows written before.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("concurrency", sa.JSON, nullable=True))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("waiting_for", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("waiting_for")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("concurrency")
