"""Re-scored final scores beside RE-Bench's rule, and scoring-noise measurements.

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
        batch.add_column(sa.Column("final_rule", sa.String(16), nullable=True))
        batch.add_column(sa.Column("rule_raw", sa.Float, nullable=True))
        batch.add_column(sa.Column("rule_normalized", sa.Float, nullable=True))
    op.create_table(
        "noise_measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("environment", sa.String(64), nullable=False, index=True),
        sa.Column("env_version", sa.String(32), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("hardware", sa.String(64), nullable=False, index=True),
        sa.Column("hardware_description", sa.Text, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("start_mean", sa.Float, nullable=False),
        sa.Column("start_sd", sa.Float, nullable=False),
        sa.Column("reference_mean", sa.Float, nullable=False),
        sa.Column("reference_sd", sa.Float, nullable=False),
        sa.Column("start_sd_normalized", sa.Float, nullable=False),
        sa.Column("final_start_sd_normalized", sa.Float, nullable=True),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("samples", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("noise_measurements")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("rule_normalized")
        batch.drop_column("rule_raw")
        batch.drop_column("final_rule")
