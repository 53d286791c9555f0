"""Human attempts over SSH: their live sessions and audited pause corrections.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "human_sessions",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("expert", sa.String(128), nullable=False, index=True),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("key_fingerprint", sa.String(128), nullable=False),
        sa.Column("bind", sa.String(64), nullable=False),
        sa.Column("port", sa.Integer, nullable=True),
        sa.Column("gate_dir", sa.Text, nullable=True),
        sa.Column("container_id", sa.String(128), nullable=True),
        sa.Column("supervisor_pid", sa.Integer, nullable=True),
        sa.Column("supervisor_host", sa.String(255), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("clock_origin", sa.Float, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stop_requested", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "pause_corrections",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pause_corrections")
    op.drop_table("human_sessions")
