"""`coordinator serve`: migrate, claim partitions, start the Kafka and admin listeners."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import ssl
import sys

import uvicorn

from api.app import create_app, uvicorn_config
from app import compiled
from app.config import Settings, advertised_admin_url, is_loopback, shown_database_url
from app.gateway.addresses import BrokerPorts, PlacementError
from app.gateway.gateway import Gateway, GatewayServer
from app.gateway.upstream import UpstreamConfig
from app.kafka.apis import version_table
from app.kafka.limits import ServerLimits
from app.kafka.server import KafkaServer, start_kafka_server
from app.runtime.node import CoordinatorNode
from app.security.listeners import Listener, listeners_of
from app.security.manager import SecurityManager
from app.security.tls import listeners_context
from app.upstream.service import GroupsUpstream
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0005
GC_THRESHOLD_0 = 20_000  # allocations between first-generation collections (default 700)


def admin_exposure_problem(settings: Settings) -> str | None:
    """Why the node must not start with these admin settings; None when it may. Secure by
    default: an admin API reachable from other machines needs COORD_ADMIN_TOKEN, unless
    COORD_ADMIN_ALLOW_INSECURE=true says the risk is known."""
    if bool(settings.admin_ssl_certfile) != bool(settings.admin_ssl_keyfile):
        return "COORD_ADMIN_SSL_CERTFILE and COORD_ADMIN_SSL_KEYFILE must be set together"
    try:
        advertised_admin_url(settings)
    except ValueError as e:
        return str(e)
    host, port = settings.admin_address
    if settings.admin_token or settings.admin_allow_insecure or is_loopback(host):
        return None
    return (
        f"refusing to start: the admin API would listen on {host or '0.0.0.0'}:{port}, which "
        "is not a loopback address, without COORD_ADMIN_TOKEN, so anyone who can reach it "
        "could delete groups, reset offsets and change users and ACLs. Set COORD_ADMIN_TOKEN "
        "(e.g. `openssl rand -hex 32`), or listen on 127.0.0.1 (COORD_ADMIN_LISTEN), or set "
        "COORD_ADMIN_ALLOW_INSECURE=true to accept the risk."
    )


async def start_gateway(
    settings: Settings,
    node: CoordinatorNode,
    limits: ServerLimits,
    listeners: list[Listener],
    security: SecurityManager,
    tls: ssl.SSLContext | None,
) -> GatewayServer:
    """The Kafka listener of gateway mode: group APIs here, the rest relayed upstream."""
    config = UpstreamConfig.from_settings(settings)
    ports = BrokerPorts(
        settings.gateway_broker_id_base,
        settings.gateway_broker_ports,
        settings.gateway_coordinator_id_base,
    )
    gateway = Gateway(
        node,
        config,
        ports,
        settings.upstream_metadata_refresh_ms,
        node.follow_topics,
        node.metrics.registry,
    )
    host, port = settings.kafka_address
    try:
        server = GatewayServer(
            gateway, node, host, port, limits, listeners=listeners, security=security, tls=tls
        )
    except PlacementError as e:
        log.error("%s", e)
        raise SystemExit(str(e)) from e
    node.upstream_status = lambda: gateway.status(server.listeners)
    groups = GroupsUpstream(settings, node, gateway.cluster, lambda: node.lease_changes)
    groups.register(node.metrics.registry)
    node.upstream = groups
    if groups.mirror is not None:
        node.runtime.committed = groups.committed
    gateway.groups = groups
    log.info("gateway mode: upstream %r, broker ids %d..%d on the ports after each listener's",
             config, ports.id_base, ports.id_base + ports.count - 1)  # fmt: skip
    await server.start()
    groups.start()  # after the first metadata refresh: leaders and the cluster id are known
    return server


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    problem = admin_exposure_problem(settings)
    if problem:
        log.error("%s", problem)
        raise SystemExit(problem)
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
    # credentials and ACLs: read before the first client can connect
    security = SecurityManager.from_settings(event_log, settings)
    await security.start()
    node = CoordinatorNode(settings, event_log, writer)
    # build the API table (kio's classes, ~2 s) before claiming leases, not on the first
    # connection, where it would stall the event loop and with it the lease renewals
    version_table()
    # Everything alive now (the imported libraries, kio's classes: most of the heap) lives as
    # long as the process: move it out of the cyclic collector's sight, or every full
    # collection walks it again (measured: ~40% of a 1000-member rebalance's CPU).
    gc.collect()
    gc.freeze()
    # The core's state holds no reference cycles (app/runtime/loader.py), so the cyclic
    # collector finds little; at its default threshold (700 allocations) a 1,000-member
    # rebalance ran ~1,400 collections (15-19 ms). A larger first generation runs a few.
    gc.set_threshold(GC_THRESHOLD_0, 10, 10)
    # The SQLite writer thread releases the GIL around every statement and must take it back
    # from a loop thread that may be busy for the whole switch interval (5 ms by default): an
    # append of thousands of rows then took seconds under a request flood, and a lease renewal
    # queued behind it. A short interval hands the GIL back sooner.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    await node.start()

    host, port = settings.kafka_address
    listeners = listeners_of(settings)
    tls = listeners_context(settings, listeners)
    limits = ServerLimits.from_settings(settings)
    if settings.gateway:
        kafka: KafkaServer = await start_gateway(settings, node, limits, listeners, security, tls)
    else:
        kafka = await start_kafka_server(
            node, host, port, limits, listeners=listeners, security=security, tls=tls
        )
    admin_host, admin_port = settings.admin_address
    admin = uvicorn.Server(
        uvicorn_config(create_app(node, settings.admin_token or None, security=security), settings)
    )
    # _serve skips uvicorn's own signal capture: this function owns SIGINT/SIGTERM
    admin_task = asyncio.create_task(admin._serve(), name="admin")
    log.info(
        "node %d serving Kafka on %s, admin on %s://%s:%d, %d log partitions, authorizer %s, "
        "database %s, hot path %s",
        settings.node_id,
        ", ".join(
            f"{li.name}://{li.host}:{li.port} (advertised {li.advertised_host}:"
            f"{li.advertised_port})"
            for li in listeners
        ),
        "https" if settings.admin_ssl_certfile else "http",
        admin_host,
        admin_port,
        node.log_partitions,
        settings.authorizer,
        shown_database_url(settings.database_url),
        compiled.STATUS,
    )
    scheme = "https" if settings.admin_ssl_certfile else "http"
    shown_host = "127.0.0.1" if admin_host in ("0.0.0.0", "::", "") else admin_host
    log.info("operator console: %s://%s:%d/ui", scheme, shown_host, admin_port)
    try:
        await stop.wait()
    finally:
        log.info("node %d shutting down", settings.node_id)
        kafka.close()
        if isinstance(kafka, GatewayServer):
            await kafka.gateway.stop()
        admin.should_exit = True
        await node.stop()
        await security.stop()
        await writer.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin_task, 5)
        await event_log.close()
