"""The cluster's shared state beside the log: live nodes (heartbeats) and cluster_meta."""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from typing import cast

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import errors
from storage.ports import NodeRow
from storage.sql.database import Database
from storage.sql.statements import Rows, Statements, Txn
from storage.sql.tables import cluster_meta, nodes

LOG_PARTITIONS = "log_partitions"
CLUSTER_ID = "cluster_id"
PEER_KEY = "admin_peer_key"


def _heartbeat(sql: Statements, node_id: int, now_ms: int) -> Txn[bool]:
    rows = yield sql.heartbeat_node(node_id, now_ms)
    return bool(rows)


def encode_listeners(listeners: dict[str, tuple[str, int]] | None) -> str | None:
    """The nodes.listeners column: a JSON object name -> "host:port" ("[v6]:port")."""
    if listeners is None:
        return None
    return json.dumps(
        {name: f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for name, (h, p) in listeners.items()},
        separators=(",", ":"),
    )


def decode_listeners(value: str | None) -> dict[str, tuple[str, int]]:
    if not value:
        return {}
    out: dict[str, tuple[str, int]] = {}
    for name, address in json.loads(value).items():
        host, _, port = str(address).rpartition(":")
        out[str(name)] = (host.removeprefix("[").removesuffix("]"), int(port))
    return out


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).

    Like Kafka's `Uuid.randomUuid()`, never one that starts with "-": Kafka's command-line
    tools (`kafka-storage format --cluster-id`) would read it as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class Cluster:
    """EventLog's node and cluster-meta operations."""

    _db: Database

    # --- nodes -----------------------------------------------------------------------------

    async def register_node(
        self,
        node_id: int,
        kafka_host: str,
        kafka_port: int,
        admin_url: str | None,
        now_ms: int,
        *,
        listeners: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        """Insert or replace this node's row (started_ms = heartbeat_ms = now_ms).
        `listeners`: listener name -> the (host, port) advertised on it."""
        values = {
            "kafka_host": kafka_host,
            "kafka_port": kafka_port,
            "admin_url": admin_url,
            "heartbeat_ms": now_ms,
            "started_ms": now_ms,
            "listeners": encode_listeners(listeners),
        }
        stmt = self._db.insert(nodes).values(node_id=node_id, **values)
        async with self._db.write() as conn:
            await conn.execute(stmt.on_conflict_do_update(index_elements=["node_id"], set_=values))

    async def heartbeat_node(self, node_id: int, now_ms: int) -> bool:
        """Refresh the node's heartbeat; False if the node is not registered. Like the lease
        renewal, one hop of the writer thread on a SQLite file: through aiosqlite it held the
        event loop about 4 ms a lease round (in the loop of a 1,000-member rebalance, a tenth
        of it)."""
        return await self._db.transact(_heartbeat(self._db.sql, node_id, now_ms))

    async def deregister_node(self, node_id: int) -> None:
        async with self._db.write() as conn:
            await conn.execute(nodes.delete().where(nodes.c.node_id == node_id))

    async def clock_ms(self) -> int:
        """The database's time in ms: what every node judges lease and node expiry by, so that
        the nodes' own clocks may disagree or step. PostgreSQL's clock_timestamp(); for SQLite,
        whose nodes share one machine, that machine's clock as SQLite reads it."""
        async with self._db.read() as conn:
            return int((await conn.execute(self._db.dialect.clock)).scalar_one())

    async def live_nodes(self, now_ms: int, ttl_ms: int) -> list[NodeRow]:
        """Nodes whose last heartbeat is younger than ttl_ms, by node_id."""
        N = nodes.c
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(
                    N.node_id,
                    N.kafka_host,
                    N.kafka_port,
                    N.admin_url,
                    N.heartbeat_ms,
                    N.started_ms,
                    N.listeners,
                )
                .where(N.heartbeat_ms > now_ms - ttl_ms)
                .order_by(N.node_id)
            )
            return [
                NodeRow(node_id, host, port, admin_url, hb, started, decode_listeners(listeners))
                for node_id, host, port, admin_url, hb, started, listeners in cast(Rows, rows.all())
            ]

    # --- cluster meta ----------------------------------------------------------------------

    async def ensure_log_partitions(self, n: int) -> int:
        """Record the number of log partitions on first use; later calls must agree with it.

        Raises ConfigMismatch when `n` differs from the stored value (changing it would move
        groups between partitions, protocol.md §3.1)."""
        if n <= 0:
            raise ValueError("log partitions must be positive")
        async with self._db.write() as conn:
            await conn.execute(
                self._db.insert(cluster_meta)
                .values(name=LOG_PARTITIONS, value=str(n))
                .on_conflict_do_nothing(index_elements=["name"])
            )
            stored = await _log_partitions(conn)
        if stored != n:
            raise errors.ConfigMismatch(
                f"{LOG_PARTITIONS}: the store was created with {stored}, configured {n}"
            )
        return n

    async def ensure_cluster_id(self) -> str:
        """The cluster's id, made on first use (`random_cluster_id`) and the same for every
        node of the store."""
        return await self._ensure_meta(CLUSTER_ID, random_cluster_id())

    async def ensure_peer_key(self) -> bytes:
        """The key the nodes sign their admin calls to each other with (api/peers.py): made on
        first use, the same for every node of the store, never sent anywhere."""
        fresh = base64.b64encode(secrets.token_bytes(32)).decode()
        return base64.b64decode(await self._ensure_meta(PEER_KEY, fresh))

    async def _ensure_meta(self, name: str, fresh: str) -> str:
        """The stored value of `name`, `fresh` stored first if there was none."""
        async with self._db.write() as conn:
            await conn.execute(
                self._db.insert(cluster_meta)
                .values(name=name, value=fresh)
                .on_conflict_do_nothing(index_elements=["name"])
            )
            stored = (
                await conn.execute(select(cluster_meta.c.value).where(cluster_meta.c.name == name))
            ).scalar()
        return str(stored)

    async def log_partitions(self) -> int | None:
        """The stored number of log partitions, or None before ensure_log_partitions()."""
        async with self._db.read() as conn:
            return await _log_partitions(conn)


async def _log_partitions(conn: AsyncConnection) -> int | None:
    v = (
        await conn.execute(
            select(cluster_meta.c.value).where(cluster_meta.c.name == LOG_PARTITIONS)
        )
    ).scalar()
    return None if v is None else int(v)
