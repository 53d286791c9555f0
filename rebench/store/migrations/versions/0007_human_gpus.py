"""The GPU ids a human attempt was started with (`rebench human start --gpus`), kept so that every
supervisor of the attempt (the first one, and one after `attach`) leases and passes the same devices.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("human_sessions") as batch:
        batch.add_column(sa.Column("gpus", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("human_sessions") as batch:
        batch.drop_column("gpus")
