"""Gateway mode put together: the upstream's view, the broker ports, the relaying listener.

`Gateway` holds what every relaying connection shares: the upstream settings and cluster view
(app/gateway/cluster.py), the port scheme (app/gateway/addresses.py), the metrics, and the
coordinator's service (whose live nodes the brokers are spread over). `GatewayServer` is the
Kafka listener (app/kafka/server.py) whose connections are `GatewayConnection`s, on each
listener's own port and on its port per upstream broker.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from app.gateway.addresses import BrokerPorts, spread
from app.gateway.authorize import AUTHORIZED
from app.gateway.authorize import CAPS as CHECK_CAPS
from app.gateway.cluster import UpstreamCluster
from app.gateway.metrics import GatewayMetrics
from app.gateway.relay import GatewayConnection
from app.gateway.routes import BASELINE, advertised
from app.gateway.upstream import UpstreamConfig
from app.kafka.apis import api_versions_answer, local_ranges
from app.kafka.connection import FramedConnection
from app.kafka.limits import ServerLimits
from app.kafka.server import KafkaServer
from app.security.listeners import Listener
from app.security.manager import SecurityManager
from app.service import Broker, CoordinatorService

log = logging.getLogger("app.gateway")


class Stoppable(Protocol):
    async def stop(self) -> None: ...


class Gateway:
    def __init__(
        self,
        service: CoordinatorService,
        config: UpstreamConfig,
        ports: BrokerPorts,
        refresh_ms: int,
        on_topics: Callable[[Mapping[str, int]], None],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.service = service
        self.config = config
        self.ports = ports
        self.cluster = UpstreamCluster(config, ports, refresh_ms, on_topics)
        self.metrics = GatewayMetrics(registry)
        self._bootstrap_turn = 0
        # the groups' dealings with the upstream (app/upstream/service.py), stopped with it
        self.groups: Stoppable | None = None

    async def stop(self) -> None:
        if self.groups is not None:
            await self.groups.stop()
        await self.cluster.stop()

    def upstream_address(self, broker_id: int | None) -> tuple[str, int] | None:
        """Where a connection to `broker_id`'s port relays; the bootstrap port (None) takes
        the known brokers in turn, else the first bootstrap address."""
        brokers = self.cluster.brokers
        if broker_id is not None:
            return brokers.get(broker_id)
        if brokers:
            self._bootstrap_turn += 1
            ids = sorted(brokers)
            return brokers[ids[self._bootstrap_turn % len(ids)]]
        return self.config.bootstrap[0]

    def _gateways(self, listener: Listener) -> list[Broker]:
        """The live nodes as clients of `listener` reach them."""
        return [b for b in (n.on(listener.name) for n in self.service.cluster().brokers) if b]

    def placer(self, listener: Listener) -> Callable[[int], tuple[str, int] | None]:
        """broker id -> its address at the gateway for a client of `listener`: on the live
        node the broker is spread to, at that node's port for it."""
        return self._place(self._gateways(listener))

    def addresses(
        self, listener: Listener
    ) -> tuple[Callable[[int], tuple[str, int] | None], list[tuple[int, str, int]]]:
        """`placer` and `coordinators` of one reading of the live nodes (a Metadata reply)."""
        gateways = self._gateways(listener)
        return self._place(gateways), self._coordinators(gateways)

    def _place(self, gateways: list[Broker]) -> Callable[[int], tuple[str, int] | None]:
        ports = self.ports

        def place(broker_id: int) -> tuple[str, int] | None:
            if not ports.placeable(broker_id):
                return None
            node = spread(broker_id, gateways)
            if node is None:
                return None
            return node.host, node.port + ports.offset(broker_id)

        return place

    def _coordinators(self, gateways: list[Broker]) -> list[tuple[int, str, int]]:
        """(node id, host, port) of the live coordinator nodes, with the ids FindCoordinator
        gives them."""
        return [(self.ports.coordinator_id(b.node_id), b.host, b.port) for b in gateways]

    def advertised_ranges(self, authorized: bool) -> dict[int, tuple[int, int]]:
        """What ApiVersions advertises through the gateway; `authorized` (our ACLs on): only
        the relayed APIs whose requests the gateway checks (app/gateway/authorize.py)."""
        upstream = self.cluster.versions or BASELINE  # unreachable since the start
        if authorized:
            return advertised(local_ranges(), upstream, AUTHORIZED, CHECK_CAPS)
        return advertised(local_ranges(), upstream)

    def api_versions(self, version: int, request: Any, authorized: bool) -> Any:
        """ApiVersions through the gateway (`advertised_ranges`)."""
        return api_versions_answer(version, request, self.advertised_ranges(authorized))

    def status(self, listeners: list[Listener]) -> dict[str, Any]:
        """What /cluster and /readyz say of the upstream, with each broker's gateway
        address on the first listener."""
        out = self.cluster.status()
        if listeners:
            place = self.placer(listeners[0])
            for b in out["brokers"]:
                at = place(b["node_id"])
                b["gateway"] = f"{at[0]}:{at[1]}" if at else None
        return out


class GatewayServer(KafkaServer):
    def __init__(
        self,
        gateway: Gateway,
        service: CoordinatorService,
        host: str,
        port: int,
        limits: ServerLimits,
        *,
        listeners: list[Listener] | None = None,
        security: SecurityManager | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(
            service, host, port, limits, listeners=listeners, security=security, tls=tls
        )
        self.gateway = gateway
        gateway.ports.check(self.listeners)

    async def start(self) -> GatewayServer:
        await self.gateway.cluster.first_refresh()  # the upstream's API ranges before any client
        await super().start()
        ports = self.gateway.ports
        for listener in self.listeners:
            for broker_id in range(ports.id_base, ports.id_base + ports.count):
                await self.listen_also(
                    listener.host,
                    ports.bound_port(listener, broker_id),
                    functools.partial(self._broker_protocol, listener, broker_id),
                )
        self.gateway.cluster.start()
        return self

    def connection(self, listener: Listener) -> FramedConnection:
        return GatewayConnection(self, listener, None)

    def _broker_protocol(self, listener: Listener, broker_id: int) -> Any:
        return self.wrap(GatewayConnection(self, listener, broker_id), listener)

    async def stop(self) -> None:
        self.close()
        await self.gateway.stop()
        await self.wait_closed()
