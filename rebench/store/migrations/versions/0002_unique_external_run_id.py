"""One attempt per imported run: a unique index on (source, external_id).

Earlier versions told imports apart by file hash and line, so importing a subset
of a file, or the same run from another file, stored the run again. Those
copies are removed here (the first stored copy of each run is kept; imported
attempts have no events, scores or pauses), then the index makes the run id
the identity. Own attempts have no external id (NULL), which the index allows
any number of times.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

INDEX = "uq_attempt_source_external_id"


def upgrade() -> None:
    op.execute(
        "DELETE FROM attempts WHERE source = 'imported' AND external_id IS NOT NULL AND id NOT IN "
        "(SELECT MIN(id) FROM attempts WHERE source = 'imported' AND external_id IS NOT NULL "
        "GROUP BY external_id)"
    )
    op.create_index(INDEX, "attempts", ["source", "external_id"], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="attempts")
