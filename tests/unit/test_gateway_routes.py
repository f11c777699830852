"""Gateway mode's pure parts: which request goes where, the versions advertised, the fields read
from a relayed request (acks, FindCoordinator's key type), and the port per upstream broker."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema

from app.gateway.addresses import BrokerPorts, PlacementError, spread
from app.gateway.routes import (
    Malformed,
    Route,
    advertised,
    api_name,
    find_coordinator_key_type,
    produce_acks,
    route,
)
from app.kafka.apis import local_ranges
from app.security.listeners import Listener, SecurityProtocol
from app.service import Broker
from membership.wire import build, encode_request


def frame(api_key: int, version: int, **values: object) -> bytes:
    """A request frame as a client writes it, without its size prefix."""
    request = build(load_request_schema(api_key, version), **values)
    return encode_request(request, 7, "client-1")[4:]


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "txn-7"])
def test_produce_acks_is_read_from_every_header_and_body_shape(
    version: int, acks: int, transactional_id: str | None
) -> None:
    data = frame(0, version, acks=acks, transactional_id=transactional_id, timeout=1000)
    assert produce_acks(data, version) == acks


@pytest.mark.parametrize(("version", "key_type"), [(1, 0), (1, 1), (2, 1), (3, 1), (4, 1), (6, 0)])
def test_find_coordinator_key_type(version: int, key_type: int) -> None:
    data = frame(10, version, key="group-or-txn", key_type=key_type, coordinator_keys=["k"])
    assert find_coordinator_key_type(data, version) == key_type
    assert find_coordinator_key_type(frame(10, 0, key="g"), 0) == 0


def test_a_truncated_request_is_malformed_not_a_crash() -> None:
    data = frame(0, 9, acks=1, transactional_id="t", timeout=1000)
    for cut in (3, 9, 12, 14, 20):
        with pytest.raises(Malformed):
            produce_acks(data[:cut], 9)


def test_group_apis_are_ours_and_the_data_plane_is_relayed() -> None:
    for key in (8, 9, 11, 12, 13, 14, 15, 16, 42, 47):
        assert route(key) is Route.LOCAL, api_name(key)
    assert route(0) is route(1) is route(2) is route(19) is route(22) is Route.RELAY
    assert route(3) is Route.METADATA
    assert route(10) is Route.FIND_COORDINATOR
    assert route(25) is route(28) is route(68) is None  # not offered (docs/gateway.md)


def test_api_versions_joins_ours_and_the_upstreams_capped_below_kip_951() -> None:
    upstream = {0: (3, 12), 1: (4, 17), 3: (0, 13), 8: (2, 9), 10: (0, 6), 19: (2, 7), 25: (0, 4)}
    merged = advertised(local_ranges(), upstream)
    assert merged[0] == (3, 9) and merged[1] == (4, 15)  # Produce, Fetch
    assert merged[8] == local_ranges()[8]  # OffsetCommit: ours, whatever the upstream's
    assert merged[19] == (2, 7)  # CreateTopics, relayed
    assert 25 not in merged  # AddOffsetsToTxn
    assert 12 in merged and 18 in merged  # Heartbeat and ApiVersions without the upstream


LISTENER = Listener(SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092, "gw.example", 19092)


def test_a_port_per_broker_after_the_listeners() -> None:
    ports = BrokerPorts(id_base=0, count=16, coordinator_id_base=1_000_000_000)
    assert ports.bound_port(LISTENER, 1) == 9094
    assert ports.broker_at(LISTENER, 9094) == 1 and ports.broker_at(LISTENER, 9092) is None
    assert ports.placeable(15) and not ports.placeable(16)
    ports.check([LISTENER])
    close = Listener(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 9100, "gw.example", 29092)
    with pytest.raises(PlacementError, match="overlap"):
        ports.check([LISTENER, close])
    with pytest.raises(PlacementError, match="port 0"):
        ports.check([Listener(SecurityProtocol.PLAINTEXT, "127.0.0.1", 0, "h", 0)])


def test_brokers_spread_over_the_live_nodes_and_move_when_one_dies() -> None:
    nodes = [Broker(n, f"node{n}", 9092) for n in (3, 1, 2)]
    placed = {b: spread(b, nodes) for b in range(6)}
    assert [placed[b].node_id for b in range(6)] == [1, 2, 3, 1, 2, 3]  # type: ignore[union-attr]
    survivors = [n for n in nodes if n.node_id != 2]
    assert {spread(b, survivors).node_id for b in range(6)} == {1, 3}  # type: ignore[union-attr]
    assert spread(0, []) is None
