"""Archive of superseded records (log_history), read by the audit pipeline.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "log_history",
        sa.Column("partition", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("offset", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("record_type", sa.SmallInteger(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("append_time_ms", sa.BigInteger(), nullable=False),
        sa.Column("compacted_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition", "offset", name="pk_log_history"),
    )


def downgrade() -> None:
    op.drop_table("log_history")
