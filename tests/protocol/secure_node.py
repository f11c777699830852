"""An in-process node whose Kafka listener has a security manager (ACL authorizer on).

`running_node` serves without one; the security API tests need requests to carry the manager,
as `coordinator serve` does with COORD_AUTHORIZER=acl. The listener is PLAINTEXT, so every
request's principal is User:ANONYMOUS: make it a super user to administer, or leave it out to
be refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.kafka.limits import ServerLimits
from app.kafka.server import KafkaServer, start_kafka_server
from app.runtime.node import CoordinatorNode
from app.security.listeners import listeners_of
from app.security.manager import SecurityManager
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
