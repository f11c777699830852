"""`coordinator serve`: migrate, claim partitions, start the Kafka and admin listeners."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys

import uvicorn

from api.app import create_app
from app.config import Settings
from app.kafka.apis import version_table
from app.kafka.limits import ServerLimits
from app.kafka.server import start_kafka_server
from app.runtime.node import CoordinatorNode
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0005


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    await upgrade_async(settings.database_url)
    # lock waits bounded well inside the lease TTL (see EventLog.open)
    event_log = await EventLog.open(
        settings.database_url, lock_wait_ms=max(settings.lease_ttl_ms // 4, 250)
    )
    writer = LogWriter(
        event_log,
        settings.node_id,
        max_record_bytes=settings.max_record_bytes,
        max_queued_records=settings.max_queued_records,
    )
    writer.start()
    node = CoordinatorNode(settings, event_log, writer)
    # build the API table (kio's classes, ~2 s) before claiming leases, not on the first
    # connection, where it would stall the event loop and with it the lease renewals
    version_table()
    # Everything alive now (the imported libraries, kio's classes: most of the heap) lives as
    # long as the process: move it out of the cyclic collector's sight, or every full
    # collection walks it again (measured: ~40% of a 1000-member rebalance's CPU).
    gc.collect()
    gc.freeze()
    # The SQLite writer thread releases the GIL around every statement and must take it back
    # from a loop thread that may be busy for the whole switch interval (5 ms by default): an
    # append of thousands of rows then took seconds under a request flood, and a lease renewal
    # queued behind it. A short interval hands the GIL back sooner.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    await node.start()

    host, port = settings.kafka_address
    kafka = await start_kafka_server(node, host, port, ServerLimits.from_settings(settings))
    admin_host, admin_port = settings.admin_address
    admin = uvicorn.Server(
        uvicorn.Config(
            create_app(node, settings.admin_token or None),
            host=admin_host,
            port=admin_port,
            log_level="warning",
            lifespan="off",
        )
    )
    # _serve skips uvicorn's own signal capture: this function owns SIGINT/SIGTERM
    admin_task = asyncio.create_task(admin._serve(), name="admin")
    log.info(
        "node %d serving Kafka on %s:%d (advertised %s:%d), admin on http://%s:%d, %d log "
        "partitions, database %s",
        settings.node_id,
        host,
        port,
        *settings.advertised_address,
        admin_host,
        admin_port,
        node.log_partitions,
        settings.database_url,
    )
    try:
        await stop.wait()
    finally:
        log.info("node %d shutting down", settings.node_id)
        kafka.close()
        admin.should_exit = True
        await node.stop()
        await writer.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin_task, 5)
        await event_log.close()
