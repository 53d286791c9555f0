"""Calibrations also measure a profile's held-out split (`final_split`, docs/heldout.md): the
starting and reference solutions scored with its params. NULL where the profile has none, and on
rows calibrated before; held-out finals then use the split's declared anchors.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calibrations") as batch:
        batch.add_column(sa.Column("heldout_start_raw", sa.Float, nullable=True))
        batch.add_column(sa.Column("heldout_reference_raw", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calibrations") as batch:
        batch.drop_column("heldout_reference_raw")
        batch.drop_column("heldout_start_raw")
