"""The gateway's rewrite of the replies that name brokers (app/gateway/rewrite.py)."""

from __future__ import annotations

import pytest

from app.gateway import rewrite
from app.kafka.codec import build, response_class

METADATA, DESCRIBE_CLUSTER = 3, 60
COORDINATORS = [(1_000_000_001, "127.0.0.1", 4000)]


def place(broker_id: int) -> tuple[str, int] | None:
    return ("127.0.0.1", 5000 + broker_id) if broker_id < 16 else None


@pytest.mark.parametrize(("api_key", "version", "key"), [
    (METADATA, 1, "node_id"), (METADATA, 12, "node_id"), (METADATA, 13, "node_id"),
    (DESCRIBE_CLUSTER, 0, "broker_id"), (DESCRIBE_CLUSTER, 1, "broker_id"),
    (DESCRIBE_CLUSTER, 2, "broker_id"),
])  # fmt: skip
def test_brokers_go_to_their_gateway_ports_and_the_coordinators_join_them(
    api_key: int, version: int, key: str
) -> None:
    """DescribeCluster names its brokers broker_id, Metadata node_id: both are rewritten (a
    DescribeCluster reply once failed with AttributeError and its connection was closed:
    kafka-consumer-groups 4.4 --describe, which lists the nodes, timed out)."""
    body = build(
        response_class(api_key, version),
        brokers=[
            {key: 1, "host": "upstream", "port": 9092},
            {key: 99, "host": "unplaced", "port": 9092},
        ],
    )
    out = rewrite.brokers(body, place, COORDINATORS)
    assert [(getattr(b, key), b.host, b.port) for b in out.brokers] == [
        (1, "127.0.0.1", 5001),
        (1_000_000_001, "127.0.0.1", 4000),
    ]


def test_the_streams_group_apis_are_not_relayed() -> None:
    """Kafka 4.1+ advertises KIP-1071's streams groups: relayed, the upstream's coordinator
    would own those groups; the gateway advertises none of them."""
    from app.gateway.routes import advertised, route

    upstream = {3: (0, 13), 88: (0, 1), 89: (0, 1), 93: (0, 0)}
    assert [route(k) for k in (88, 89, 93)] == [None, None, None]
    assert set(advertised({}, upstream)) == {3}
