"""Durable resource leases (rebench.scheduler.leases): one row per GPU an attempt holds (or one
without a device for an attempt that needs none, and one for each campaign's runner), with the
holder's pid, host and heartbeat, so two harness processes never share a GPU and a dead one's
attempts are found by its stale heartbeat.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("device", sa.Integer, nullable=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=True, index=True),
        sa.Column("campaign_id", sa.Integer, sa.ForeignKey("campaigns.id"), nullable=True, index=True),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("waiting_gpus", sa.Integer, nullable=False),
        sa.Column("holder_pid", sa.Integer, nullable=False),
        sa.Column("holder_host", sa.String(255), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("release_reason", sa.Text, nullable=True),
    )
    op.create_index("ix_leases_active", "leases", ["released_at", "host"])
    # the guarantee itself: at most one unreleased lease per device of a host
    op.create_index("uq_leases_active_device", "leases", ["host", "device"], unique=True,
                    sqlite_where=sa.text("released_at IS NULL AND device IS NOT NULL"))
    # and one live runner per campaign (two `--resume` of it at once: the second is refused)
    op.create_index("uq_leases_active_campaign", "leases", ["campaign_id"], unique=True,
                    sqlite_where=sa.text("released_at IS NULL AND kind = 'campaign'"))


def downgrade() -> None:
    op.drop_index("uq_leases_active_campaign", "leases")
    op.drop_index("uq_leases_active_device", "leases")
    op.drop_index("ix_leases_active", "leases")
    op.drop_table("leases")
