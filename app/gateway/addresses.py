"""Where clients reach each upstream broker through the gateway: a port per broker.

Every gateway node listens, beside each of its listeners (port P, advertised A), on one port per
upstream broker id b in [id base, id base + broker ports): bound at P + 1 + (b - id base),
advertised at A + 1 + (b - id base). A connection to such a port relays to broker b; one to P
itself (the bootstrap address) relays to any broker. Every node listens on every broker's port,
so the Metadata a node hands out may place a broker on any live node: broker b goes to the
(b mod n)-th of the n live nodes by node id, and when a node dies its brokers move to the others
with the next Metadata (a client that loses a connection asks for it). A broker id outside the
range cannot be placed: the node logs it and /readyz names it.

The coordinator's own node ids (FindCoordinator's answer for a group) are COORD_GATEWAY_
COORDINATOR_ID_BASE + node id, far above any broker id, so a client never sees two addresses for
one id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.security.listeners import Listener
from app.service import Broker


class PlacementError(ValueError):
    """The broker ports of the settings collide with a listener or with each other."""


@dataclass(frozen=True, slots=True)
class BrokerPorts:
    id_base: int  # the smallest broker id with a port
    count: int  # how many broker ids have one
    coordinator_id_base: int

    def placeable(self, broker_id: int) -> bool:
        return self.id_base <= broker_id < self.id_base + self.count

    def offset(self, broker_id: int) -> int:
        return 1 + broker_id - self.id_base

    def bound_port(self, listener: Listener, broker_id: int) -> int:
        return listener.port + self.offset(broker_id)

    def broker_at(self, listener: Listener, port: int) -> int | None:
        """The broker a connection to `port` of `listener` relays to; None: the bootstrap port."""
        if port == listener.port:
            return None
        return self.id_base + port - listener.port - 1

    def coordinator_id(self, node_id: int) -> int:
        return self.coordinator_id_base + node_id

    def check(self, listeners: Sequence[Listener]) -> None:
        """PlacementError when two listeners' ports or broker port ranges overlap (bound or
        advertised), or a port falls outside 1..65535."""
        for li in listeners:
            if li.port == 0:
                raise PlacementError(
                    f"the {li.name} listener binds port 0: gateway mode places the broker ports "
                    "after a fixed listener port"
                )
        for attr in ("port", "advertised_port"):
            taken: dict[int, str] = {}
            for li in listeners:
                first = getattr(li, attr)
                for port in range(first, first + 1 + self.count):
                    if not 0 < port < 65536:
                        raise PlacementError(
                            f"{li.name} {attr.replace('_', ' ')} {first} leaves no room for "
                            f"{self.count} broker ports (COORD_GATEWAY_BROKER_PORTS)"
                        )
                    if port in taken:
                        raise PlacementError(
                            f"the {li.name} listener's broker ports "
                            f"({first + 1}..{first + self.count}) overlap the {taken[port]} "
                            f"listener's at {port}: space the listeners "
                            "more than COORD_GATEWAY_BROKER_PORTS apart"
                        )
                    taken[port] = li.name
        if self.coordinator_id_base < self.id_base + self.count:
            raise PlacementError(
                "COORD_GATEWAY_COORDINATOR_ID_BASE must lie above every placeable broker id"
            )


def spread(broker_id: int, gateways: Sequence[Broker]) -> Broker | None:
    """The live gateway node (sorted by node id) that Metadata places `broker_id` on."""
    if not gateways:
        return None
    ordered = sorted(gateways, key=lambda b: b.node_id)
    return ordered[broker_id % len(ordered)]
