"""The Kafka listener: its sockets, and what is shared between its connections.

`KafkaServer` listens on each listener's address and makes a connection per client (app/kafka/
dispatch.py's `KafkaConnection`: the connection room, app/kafka/connection.py, the
authentication gate, app/kafka/gate.py, and dispatch over the API table), behind TLS where the
listener says. It holds what no single connection can decide: admission (how many connections,
in all and per address), one large frame per turn of the loop, load shedding when the loop
falls behind, and the sweep of slow, unauthenticated and idle connections. The event loop is
whoever started it (uvloop if they installed it).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from app.kafka.apis import version_table
from app.kafka.connection import FramedConnection
from app.kafka.dispatch import KafkaConnection
from app.kafka.limits import SHED_CHECK_S, SHED_LAG_S, ServerLimits
from app.security.listeners import Listener, SecurityProtocol
from app.security.manager import SecurityManager
from app.security.tls import TlsLayer
from app.service import CoordinatorService


class KafkaServer(asyncio.AbstractServer):
    """The listening socket plus its connections; `close()` also drops open connections."""

    def __init__(
        self,
        service: CoordinatorService,
        host: str,
        port: int,
        limits: ServerLimits,
        *,
        listeners: list[Listener] | None = None,
        security: SecurityManager | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.service = service
        self.host = host
        self.requested_port = port
        self.limits = limits
        self.listeners = listeners or [Listener(SecurityProtocol.PLAINTEXT, host, port, host, port)]
        self.security = security
        self.tls = tls
        for listener in self.listeners:
            if listener.protocol.sasl and security is None:
                raise ValueError(f"a {listener.name} listener needs the security manager")
            if listener.protocol.tls and (tls is None or security is None):
                raise ValueError(f"a {listener.name} listener needs a TLS context")
        self._servers: dict[str, asyncio.Server] = {}
        self._also: list[asyncio.Server] = []
        self.connections: set[FramedConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._heavy_taken = False
        self._heavy_waiting: deque[FramedConnection] = deque()
        self.shedding = False
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self) -> KafkaServer:
        version_table()  # load every kio class before the first client arrives
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            self._servers[listener.name] = await loop.create_server(
                functools.partial(self._protocol, listener), listener.host, listener.port
            )
        self._server = self._servers[self.listeners[0].name]
        self._sweeper = loop.create_task(self._sweep(), name="kafka-connection-deadlines")
        self._watchdog = loop.create_task(self._watch_lag(), name="kafka-load-shedding")
        return self

    async def _watch_lag(self) -> None:
        """When the loop falls behind (a flood of requests, however valid each is), every
        connection stops reading until it catches up: lease renewals and timers, which wait
        for turns of the same loop, must not starve, or the node would lose its leases."""
        loop = asyncio.get_running_loop()
        # optional metrics hook of the service: each reading, in seconds
        observe: Callable[[float], None] | None = getattr(self.service, "observe_loop_lag", None)
        while True:
            started = loop.time()
            await asyncio.sleep(SHED_CHECK_S)
            lag = max(loop.time() - started - SHED_CHECK_S, 0.0)
            if observe is not None:
                observe(lag)
            if lag > SHED_LAG_S and not self.shedding:
                self._shed_all(True)
            elif lag < SHED_LAG_S / 4 and self.shedding:
                self._shed_all(False)

    def _shed_all(self, on: bool) -> None:
        self.shedding = on
        for conn in list(self.connections):
            conn.shed(on)

    def _protocol(self, listener: Listener) -> asyncio.Protocol:
        return self.wrap(self.connection(listener), listener)

    def connection(self, listener: Listener) -> FramedConnection:
        """A new client connection on `listener` (a gateway's relays as well)."""
        return KafkaConnection(self, listener)

    def wrap(self, conn: FramedConnection, listener: Listener) -> asyncio.Protocol:
        """`conn` behind TLS when its listener says so."""
        if not listener.protocol.tls:
            return conn
        assert self.tls is not None and self.security is not None
        return TlsLayer(conn, self.tls, self.security.offload)

    async def listen_also(
        self, host: str, port: int, factory: Callable[[], asyncio.Protocol]
    ) -> asyncio.Server:
        """One more listening socket whose connections this server admits, sheds and sweeps
        like its own (a gateway's port per upstream broker); closed with the others."""
        server = await asyncio.get_running_loop().create_server(factory, host, port)
        self._also.append(server)
        return server

    def port_of(self, listener: str) -> int:
        return int(self._servers[listener].sockets[0].getsockname()[1])

    def admit(self, conn: FramedConnection) -> str | None:
        """Count a new connection in; the reason to refuse it when over a limit."""
        limits = self.limits
        if len(self.connections) >= limits.max_connections:
            return f"{len(self.connections)} connections open (COORD_MAX_CONNECTIONS)"
        n = self._per_ip.get(conn.ip, 0)
        if n >= limits.max_connections_per_ip:
            return f"{n} connections open from {conn.ip} (COORD_MAX_CONNECTIONS_PER_IP)"
        self.connections.add(conn)
        self._per_ip[conn.ip] = n + 1
        return None

    def take_heavy_turn(self) -> bool:
        """Whether a large frame may be served now (one per turn of the loop)."""
        if self._heavy_taken:
            return False
        self._heavy_taken = True
        asyncio.get_running_loop().call_soon(self._next_heavy_turn)
        return True

    def wait_heavy_turn(self, conn: FramedConnection) -> None:
        self._heavy_waiting.append(conn)

    def _next_heavy_turn(self) -> None:
        self._heavy_taken = False
        while self._heavy_waiting:
            conn = self._heavy_waiting.popleft()
            if not conn.closing:
                conn.heavy_turn()
                return

    def forget(self, conn: FramedConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            n = self._per_ip.get(conn.ip, 1) - 1
            if n > 0:
                self._per_ip[conn.ip] = n
            else:
                self._per_ip.pop(conn.ip, None)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1)
            now = loop.time()
            for conn in list(self.connections):
                conn.check_deadlines(now, self.limits)

    @property
    def server(self) -> asyncio.Server:
        if self._server is None:
            raise RuntimeError("KafkaServer not started")
        return self._server

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self.server.sockets)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        for server in [*self._servers.values(), *self._also]:
            server.close()
        for task in (self._sweeper, self._watchdog):
            if task is not None:
                task.cancel()
        self._sweeper = self._watchdog = None
        for conn in list(self.connections):
            conn.close()

    async def wait_closed(self) -> None:
        for server in [*self._servers.values(), *self._also]:
            await server.wait_closed()

    async def stop(self) -> None:
        self.close()
        await self.wait_closed()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.server.get_loop()

    def is_serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def start_serving(self) -> None:
        await self.server.start_serving()

    async def serve_forever(self) -> None:
        await self.server.serve_forever()


async def start_kafka_server(
    service: CoordinatorService,
    host: str,
    port: int,
    limits: ServerLimits | None = None,
    *,
    listeners: list[Listener] | None = None,
    security: SecurityManager | None = None,
    tls: ssl.SSLContext | None = None,
) -> KafkaServer:
    """Listen on host:port (one PLAINTEXT listener), or on `listeners`; returns a started
    `KafkaServer` (an `asyncio.AbstractServer`)."""
    server = KafkaServer(
        service,
        host,
        port,
        limits or ServerLimits(),
        listeners=listeners,
        security=security,
        tls=tls,
    )
    return await server.start()
