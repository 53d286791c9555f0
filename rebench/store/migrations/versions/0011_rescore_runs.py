"""Re-scoring saved attempts (`rebench rescore`): one row per run (what scored, where, with which
anchors) and one per attempt it covered. Original score rows are never rewritten.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rescore_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("selection", sa.JSON, nullable=False),
        sa.Column("attempt_ids", sa.JSON, nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("hardware", sa.String(64), nullable=False),
        sa.Column("hardware_description", sa.Text, nullable=False),
        sa.Column("environments", sa.JSON, nullable=False),
        sa.Column("kit_version", sa.String(64), nullable=False),
        sa.Column("parallel", sa.Integer, nullable=False),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
    )
    op.create_table(
        "rescores",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("rescore_runs.id"), nullable=False, index=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("rule", sa.String(16), nullable=True),
        sa.Column("env_version", sa.String(32), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=True),
        sa.Column("final_raw", sa.Float, nullable=True),
        sa.Column("final_normalized", sa.Float, nullable=True),
        sa.Column("anchors_start", sa.Float, nullable=True),
        sa.Column("anchors_reference", sa.Float, nullable=True),
        sa.Column("anchors_kind", sa.String(16), nullable=True),
        sa.Column("heldout_raw", sa.Float, nullable=True),
        sa.Column("heldout_normalized", sa.Float, nullable=True),
        sa.Column("scores", sa.JSON, nullable=False),
        sa.Column("skipped_snapshots", sa.JSON, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "attempt_id", name="uq_rescore_run_attempt"),
    )


def downgrade() -> None:
    op.drop_table("rescores")
    op.drop_table("rescore_runs")
