"""An in-process node whose Kafka listener has a security manager (ACL authorizer on).

`running_node` serves without one; the security API tests need requests to carry the manager,
as `coordinator serve` does with COORD_AUTHORIZER=acl. The listener is PLAINTEXT, so every
request's principal is User:ANONYMOUS: make it a super user to administer, or leave it out to
be refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.kafka.limits import ServerLimits
from app.kafka.server import KafkaServer, start_kafka_server
from app.runtime.node import CoordinatorNode
from app.security.acl import AclBinding
from app.security.listeners import listeners_of
from app.security.manager import SecurityManager
from app.security.sasl import make_credential
from app.security.tls import listeners_context
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter
from tests.runtime.node_fixture import sqlite_url
from tests.support.ports import free_port


@dataclass
class SecureNode:
    node: CoordinatorNode
    server: KafkaServer
    log: EventLog
    security: SecurityManager
    settings: Settings

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def port_of(self, listener: str) -> int:
        return self.server.port_of(listener)


@asynccontextmanager
async def secure_node(
    tmp_path: Path,
    *,
    super_users: str = "User:ANONYMOUS",
    authorizer: str = "acl",
    **overrides: Any,
) -> AsyncIterator[SecureNode]:
    values: dict[str, Any] = {
        "database_url": sqlite_url(tmp_path),
        "kafka_listen": f"127.0.0.1:{free_port()}",
        "initial_rebalance_delay_ms": 0,
        "log_partitions": 2,
        "topics": "t1:3",
        "authorizer": authorizer,
        "super_users": super_users,
    }
    values.update(overrides)
    settings = Settings(**values)
    await upgrade_async(settings.database_url)
    event_log = await EventLog.open(settings.database_url)
    security = SecurityManager.from_settings(event_log, settings)
    await security.start()
    writer = LogWriter(event_log, settings.node_id)
    writer.start()
    node = CoordinatorNode(settings, event_log, writer)
    await node.start()
    await node.wait_loaded()
    host, port = settings.kafka_address
    listeners = listeners_of(settings)
    tls = listeners_context(settings, listeners)
    server = await start_kafka_server(
        node,
        host,
        port,
        ServerLimits.from_settings(settings),
        listeners=listeners,
        security=security,
        tls=tls,
    )
    try:
        yield SecureNode(node, server, event_log, security, settings)
    finally:
        server.close()
        await node.stop()
        await writer.stop()
        await security.stop()
        await event_log.close()


@asynccontextmanager
async def sasl_node(
    tmp_path: Path,
    users: Sequence[str],
    acls: Sequence[AclBinding],
    *,
    password: str,
    mechanism: str = "SCRAM-SHA-256",
    topics: str = "t1:3,t2:2",
) -> AsyncIterator[SecureNode]:
    """A node with a SASL_PLAINTEXT listener (advertised as sasl.example) and a PLAINTEXT one
    (plain.example), super user User:admin, `users` sharing `password`, and `acls`."""
    sasl, plain = free_port(), free_port()
    async with secure_node(
        tmp_path,
        super_users="User:admin",
        listeners=f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
        advertised_listeners=(
            f"SASL_PLAINTEXT://sasl.example:{sasl},PLAINTEXT://plain.example:{plain}"
        ),
        topics=topics,
    ) as n:
        await n.log.upsert_scram_credentials(
            [make_credential(u, mechanism, password) for u in users]
        )
        await n.log.create_acls(acls)
        await n.security.refresh(force=True)
        yield n
