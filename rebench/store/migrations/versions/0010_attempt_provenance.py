"""Which rebench and which exact environment folder ran each attempt: the rebench version and the
environment's content hash (the hash its images and built assets are keyed by), so that a score
can be traced to the code that produced it. Older and imported attempts have neither (NULL).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("rebench_version", sa.String(32), nullable=True))
        batch.add_column(sa.Column("env_hash", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("env_hash")
        batch.drop_column("rebench_version")
