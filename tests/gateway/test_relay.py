"""The relay's own promises, on the wire (a raw client through a gateway node to Apache Kafka):
replies in request order whether relayed or answered here, acks=0 without a reply, brokers at
their gateway ports, and what happens with no upstream at all."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import CoordinatorProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(120)


def fetch_request(topic: str, max_wait_ms: int, fetch_offset: int = 1_000_000) -> Any:
    """Fetch v12 of partition 0; past the end by default, so the broker waits max_wait."""
    return KafkaTestClient.build_request(
        1,
        12,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": fetch_offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


async def test_relayed_and_local_replies_leave_in_request_order(
    gateway_factory: Callable[..., CoordinatorProcess], topic: str
) -> None:
    node = gateway_factory()
    client = await KafkaTestClient.connect(*node.address)
    try:
        # a long-poll Fetch (relayed, ~1 s), then a Heartbeat answered here at once
        fetch = client.send(fetch_request(topic, 1000))
        beat = client.send(client.heartbeat_request("no-such-group", 1, "m", version=4))
        await asyncio.gather(fetch, beat)
        # a JoinGroup that parks (the group's initial rebalance delay), then a Fetch that the
        # broker answers at once
        join = client.send(client.join_group_request("ordering", "", version=3))
        quick = client.send(fetch_request(topic, 0))
        joined, fetched = await asyncio.gather(join, quick)
        assert int(joined.error_code) == 0 and fetched is not None
        assert client.received == sorted(client.received)  # correlation ids in send order
        assert len(client.received) == 4 and client.unexpected == []
    finally:
        await client.close()


async def test_acks_0_gets_no_reply_and_the_next_request_still_does(
    gateway_factory: Callable[..., CoordinatorProcess], topic: str
) -> None:
    node = gateway_factory()
    client = await KafkaTestClient.connect(*node.address)
    try:
        produce = KafkaTestClient.build_request(
            0, 9, acks=0, timeout=1000, transactional_id=None, topic_data=[]
        )
        assert await client.send(produce) is None
        reply = await client.request(client.build_request(3, 12, topics=None))
        brokers = {int(b.node_id): (b.host, b.port) for b in reply.brokers}
        assert brokers == {
            1: ("127.0.0.1", node.kafka_port + 2),  # the upstream's broker 1 at its port
            1_000_000_001: ("127.0.0.1", node.kafka_port),  # the coordinator, node 1
        }
        assert topic in {t.name for t in reply.topics}
        assert client.unexpected == []
    finally:
        await client.close()


async def test_without_an_upstream_the_node_serves_groups_and_readyz_names_it(
    tmp_path: Any, apache_kafka_broker: KafkaBroker
) -> None:
    from tests.gateway.conftest import gateway_process

    nowhere = f"127.0.0.1:{free_port()}"
    node = gateway_process(
        tmp_path / "alone", apache_kafka_broker, COORD_UPSTREAM_BOOTSTRAP=nowhere
    )
    node.start(wait_ready=False)
    try:
        await asyncio.sleep(0.5)
        for _ in range(100):
            try:
                with urllib.request.urlopen(node.admin_url + "/readyz", timeout=5) as r:
                    body = json.loads(r.read())
            except urllib.error.HTTPError as e:
                body = json.loads(e.read())
                if e.code == 503 and body.get("upstream", {}).get("problem"):
                    break
            except OSError:
                pass
            await asyncio.sleep(0.2)
        else:
            pytest.fail("/readyz never named the unreachable upstream")
        assert nowhere in body["upstream"]["problem"] and not body["ready"]
        client = await KafkaTestClient.connect(*node.address)
        try:
            # the relayed APIs are advertised all the same (a client keeps the answer for its
            # connection's life: it must still relay there once the upstream is back)
            versions = await client.api_versions()
            keys = {int(k.api_key) for k in versions.api_keys}
            assert {0, 1, 3, 11, 12} <= keys
            coordinator = await client.find_coordinator("alone-group")
            assert int(coordinator.error_code) == 0
            assert int(coordinator.node_id) == 1_000_000_001  # ids apart from any broker's
            # a relayed request: the connection closes (the client's retry path), nothing else
            client.send(client.build_request(3, 12, topics=None))
            await client.wait_closed(10)
        finally:
            await client.close()
        assert node.running
        # the topics are the upstream's: the admin API creates none of its own
        request = urllib.request.Request(
            node.admin_url + "/topics",
            data=json.dumps({"name": "local-only", "partitions": 3}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 409
        assert "upstream" in json.loads(refused.value.read())["detail"]
    finally:
        node.kill()
