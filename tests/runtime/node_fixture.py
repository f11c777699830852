"""An in-process coordinator node (real storage, real Kafka listener) for runtime tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.kafka.limits import ServerLimits
from app.kafka.server import KafkaServer, start_kafka_server
from app.runtime.node import CoordinatorNode
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter
from tests.support.kafka_client import KafkaTestClient
from tests.support.ports import free_port


@dataclass
class RunningNode:
    node: CoordinatorNode
    server: KafkaServer
    log: EventLog
    writer: LogWriter
    settings: Settings

    @property
    def port(self) -> int:
        return self.server.port

    async def client(self, client_id: str = "test") -> KafkaTestClient:
        return await KafkaTestClient.connect("127.0.0.1", self.port, client_id=client_id)


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/coordinator.db"


@asynccontextmanager
async def running_node(
    tmp_path: Path,
    *,
    wait_loaded: bool = True,
    prepare: Callable[[EventLog], None] | None = None,
    **overrides: Any,
) -> AsyncIterator[RunningNode]:
    values: dict[str, Any] = {
        "database_url": sqlite_url(tmp_path),
        # a real port, so Metadata/FindCoordinator advertise what clients can reach
        "kafka_listen": f"127.0.0.1:{free_port()}",
        "initial_rebalance_delay_ms": 0,
        "log_partitions": 4,
        "topics": "t1:3,t6:6",
    }
    values.update(overrides)
    settings = Settings(**values)
    await upgrade_async(settings.database_url)
    event_log = await EventLog.open(settings.database_url)
    if prepare is not None:
        prepare(event_log)
    writer = LogWriter(
        event_log,
        settings.node_id,
        max_record_bytes=settings.max_record_bytes,
        max_queued_records=settings.max_queued_records,
    )
    writer.start()
    node = CoordinatorNode(settings, event_log, writer)
    await node.start()
    if wait_loaded:
        await node.wait_loaded()
    host, port = settings.kafka_address
    server = await start_kafka_server(node, host, port, ServerLimits.from_settings(settings))
    try:
        yield RunningNode(node, server, event_log, writer, settings)
    finally:
        server.close()
        await node.stop()
        await writer.stop()
        await event_log.close()
