"""Security: SCRAM credentials, ACL bindings, and each node's listeners.

The change counter of both (cluster_meta row `security_version`) needs no schema.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "scram_credentials",
        sa.Column("user_name", sa.Text(), nullable=False),
        sa.Column("mechanism", sa.String(32), nullable=False),
        sa.Column("salt", sa.LargeBinary(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("stored_key", sa.LargeBinary(), nullable=False),
        sa.Column("server_key", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("user_name", "mechanism", name="pk_scram_credentials"),
    )
    op.create_table(
        "acls",
        sa.Column("binding_key", sa.LargeBinary(), nullable=False),
        sa.Column("resource_type", sa.SmallInteger(), nullable=False),
        sa.Column("resource_name", sa.Text(), nullable=False),
        sa.Column("pattern_type", sa.SmallInteger(), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("operation", sa.SmallInteger(), nullable=False),
        sa.Column("permission", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("binding_key", name="pk_acls"),
    )
    # SQLite adds a nullable column in place (no table rebuild); so does PostgreSQL
    op.add_column("nodes", sa.Column("listeners", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("listeners")
    op.drop_table("acls")
    op.drop_table("scram_credentials")
