"""SQLAlchemy Core schema of the event log. Migrations in migrations/versions mirror it exactly
(tests/storage compares the migrated schema against this metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
)

from storage.columns import HISTORY_COLUMNS, LOG_COLUMNS, LogColumn

# Deterministic constraint/index names, so Alembic can address them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _log_table(name: str, columns: Iterable[LogColumn], *extra: Any) -> Table:
    return Table(
        name,
        metadata,
        *(Column(c.name, c.sql, nullable=c.nullable, autoincrement=False) for c in columns),
        PrimaryKeyConstraint("partition", "offset"),
        *extra,
    )


# One row per record.
log_records = _log_table(
    "log_records",
    LOG_COLUMNS,
    Index(None, "partition", "key"),  # compaction: latest record per key
)

# Records the compactor removed from log_records (superseded values, expired tombstones), kept
# for the audit pipeline when COORD_ARCHIVE_HISTORY is on.
log_history = _log_table("log_history", HISTORY_COLUMNS)

# The fence: only owner_node_id at `epoch` may append to `partition`.
partition_leases = Table(
    "partition_leases",
    metadata,
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("owner_node_id", Integer, nullable=True),  # NULL = released
    Column("epoch", Integer, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("node_id", Integer, primary_key=True, autoincrement=False),
    Column("kafka_host", String(255), nullable=False),
    Column("kafka_port", Integer, nullable=False),
    Column("admin_url", String(1024), nullable=True),
    Column("heartbeat_ms", BigInteger, nullable=False),
    Column("started_ms", BigInteger, nullable=False),
    # JSON object listener name -> "host:port" (the advertised address of each listener)
    Column("listeners", Text, nullable=True),
)

cluster_meta = Table(
    "cluster_meta",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

# SCRAM credentials (KIP-84, RFC 5802): per user and mechanism what verifies a password,
# never the password itself. Shared by every node (storage/sql/security.py).
scram_credentials = Table(
    "scram_credentials",
    metadata,
    Column("user_name", Text, nullable=False),
    Column("mechanism", String(32), nullable=False),  # "SCRAM-SHA-256" | "SCRAM-SHA-512"
    Column("salt", LargeBinary, nullable=False),
    Column("iterations", Integer, nullable=False),
    Column("stored_key", LargeBinary, nullable=False),
    Column("server_key", LargeBinary, nullable=False),
    PrimaryKeyConstraint("user_name", "mechanism"),
)

# ACL bindings; the small ints are the wire codes of storage/security.py's enums.
# binding_key is the SHA-256 of the seven fields (storage/sql/security.py): the key that makes a
# binding unique, short whatever the length of its names (a PostgreSQL index entry over the
# names themselves is limited to about 2.7 kB, a group id may be 4 kB).
acls = Table(
    "acls",
    metadata,
    Column("binding_key", LargeBinary, primary_key=True),
    Column("resource_type", SmallInteger, nullable=False),
    Column("resource_name", Text, nullable=False),
    Column("pattern_type", SmallInteger, nullable=False),
    Column("principal", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("operation", SmallInteger, nullable=False),
    Column("permission", SmallInteger, nullable=False),
)
