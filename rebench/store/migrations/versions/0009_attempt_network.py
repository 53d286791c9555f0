"""The network policy of each attempt's sandbox (`rebench run --network none|full`), so that
results with and without network are never pooled unawares. Attempts run before it had no
network (`none`); imported METR runs had RE-Bench's full internet access (`full`).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("network", sa.String(8), nullable=False, server_default="none"))
    op.execute("UPDATE attempts SET network = 'full' WHERE source = 'imported'")


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("network")
