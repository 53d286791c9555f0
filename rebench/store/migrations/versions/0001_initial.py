"""Initial schema: campaigns, attempts, events, score events, pauses, calibrations.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("campaign_id", sa.Integer, sa.ForeignKey("campaigns.id"), index=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("environment", sa.String(64), nullable=False, index=True),
        sa.Column("env_version", sa.String(32), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("agent", sa.String(128), nullable=False, index=True),
        sa.Column("model", sa.String(128)),
        sa.Column("budget_s", sa.Float, nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("backend", sa.String(16)),
        sa.Column("image_id", sa.String(128)),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("error_source", sa.String(16)),
        sa.Column("error_message", sa.Text),
        sa.Column("limit_reason", sa.String(32)),
        sa.Column("retry_of", sa.Integer, sa.ForeignKey("attempts.id")),
        sa.Column("counted", sa.Boolean, nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("started_at", _TS),
        sa.Column("ended_at", _TS),
        sa.Column("wall_s", sa.Float, nullable=False),
        sa.Column("working_s", sa.Float, nullable=False),
        sa.Column("model_wait_s", sa.Float, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("cached_tokens", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("submitted", sa.Boolean, nullable=False),
        sa.Column("final_raw", sa.Float),
        sa.Column("final_normalized", sa.Float),
        sa.Column("anchors_kind", sa.String(16)),
        sa.Column("snapshot_path", sa.Text),
        sa.Column("import_sha256", sa.String(64)),
        sa.Column("import_row", sa.Integer),
        sa.Column("external_id", sa.String(128)),
        sa.UniqueConstraint("import_sha256", "import_row", name="uq_attempt_import_provenance"),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("working_s", sa.Float, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_table(
        "score_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("working_s", sa.Float, nullable=False),
        sa.Column("raw", sa.Float),
        sa.Column("valid", sa.Boolean, nullable=False),
        sa.Column("message", sa.JSON, nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "pauses",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), nullable=False, index=True),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float),
    )
    op.create_table(
        "calibrations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("environment", sa.String(64), nullable=False, index=True),
        sa.Column("env_version", sa.String(32), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("hardware", sa.String(64), nullable=False, index=True),
        sa.Column("hardware_description", sa.Text, nullable=False),
        sa.Column("start_raw", sa.Float, nullable=False),
        sa.Column("reference_raw", sa.Float, nullable=False),
        sa.Column("samples", sa.JSON, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )


def downgrade() -> None:
    for table in ("calibrations", "pauses", "score_events", "events", "attempts", "campaigns"):
        op.drop_table(table)
