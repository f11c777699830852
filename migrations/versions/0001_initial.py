"""Event log, partition leases, nodes, cluster meta.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "log_records",
        sa.Column("partition", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("offset", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("record_type", sa.SmallInteger(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("append_time_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition", "offset", name="pk_log_records"),
    )
    op.create_index("ix_log_records_partition_key", "log_records", ["partition", "key"])
    op.create_table(
        "partition_leases",
        sa.Column("partition", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("owner_node_id", sa.Integer(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition", name="pk_partition_leases"),
    )
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("kafka_host", sa.String(255), nullable=False),
        sa.Column("kafka_port", sa.Integer(), nullable=False),
        sa.Column("admin_url", sa.String(1024), nullable=True),
        sa.Column("heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", name="pk_nodes"),
    )
    op.create_table(
        "cluster_meta",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_cluster_meta"),
    )


def downgrade() -> None:
    op.drop_table("cluster_meta")
    op.drop_table("nodes")
    op.drop_table("partition_leases")
    op.drop_index("ix_log_records_partition_key", table_name="log_records")
    op.drop_table("log_records")
