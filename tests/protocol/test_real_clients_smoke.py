"""Unmodified clients (kafka-python, aiokafka, confluent-kafka) against the real node: one
consumer joins, gets every partition, commits, fetches its commit and leaves. While it is in the
group the test inspects the node with its own client (DescribeGroups, ListGroups), and after it
left, that the group is Empty and the commit durable. Multi-member and failover scenarios with
client processes live in tests/integration."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from app.group.consumer_protocol import decode_assignment, decode_subscription
from tests.protocol.groups import committed, describe, list_groups
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

DEADLINE_S = 30.0


class Handshake:
    """The consumer thread says when it has its assignment, then waits while the test inspects
    the group. Whatever the inspection finds, the consumer then finishes (or just closes) while
    the node is still up: a librdkafka synchronous commit without a coordinator never returns."""

    def __init__(self) -> None:
        self.assigned = threading.Event()
        self.go = threading.Event()
        self.inspection_failed = False

    def consumer_side(self) -> None:
        self.assigned.set()
        if not self.go.wait(DEADLINE_S):
            raise TimeoutError("the test never looked at the group")
        if self.inspection_failed:
            raise RuntimeError("inspection failed: close without committing")

    async def test_side(self, thread: asyncio.Future[Any], inspect: Callable[[], Any]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not self.assigned.is_set() and not thread.done():
            assert time.monotonic() < deadline, "the consumer got no assignment"
            await asyncio.sleep(0.05)
        if thread.done():
            thread.result()  # the consumer failed before its handshake: raise that
        try:
            await inspect()
        except BaseException:
            self.inspection_failed = True
            self.go.set()
            with contextlib.suppress(Exception):
                await thread
            raise
        self.go.set()


async def _assert_one_member_owns_t1(
    client: KafkaTestClient, group: str, client_id: str, protocol: str
) -> None:
    d = await describe(client, group)
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", protocol)
    (m,) = d.members
    assert m.member_id.startswith(f"{client_id}-")  # dynamic member: <clientId>-<uuid>
    assert (m.client_id, m.client_host, m.group_instance_id) == (client_id, "/127.0.0.1", None)
    assert "t1" in decode_subscription(m.member_metadata).topics
    assert dict(decode_assignment(m.member_assignment).partitions) == {"t1": (0, 1, 2)}
    listed = {g.group_id: g for g in (await list_groups(client)).groups}
    assert (listed[group].protocol_type, listed[group].group_state) == ("consumer", "Stable")


async def _assert_left_with_commit(
    client: KafkaTestClient, group: str, partition: int, offset: int
) -> None:
    d = await describe(client, group)
    assert (d.group_state, list(d.members)) == ("Empty", [])  # the consumer sent LeaveGroup
    assert await committed(client, group, [("t1", partition)]) == [offset]


async def test_kafka_python_consumer(node: RunningNode, client: KafkaTestClient) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    handshake = Handshake()

    def run() -> tuple[set[int], int | None]:
        consumer = KafkaConsumer(
            "t1",
            bootstrap_servers=f"127.0.0.1:{node.port}",
            group_id="g-kp",
            client_id="kp",
            enable_auto_commit=False,  # else close() commits its position (0) over ours
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
                # A long poll on purpose: kafka-python 3.0.12 can lose a rebalance whose
                # SyncGroup reply lands just after poll() timed out inside ensure_active_group
                # (observed ~1 in 30 joins with poll(100); the reply was on the wire in time).
                consumer.poll(1000)
            assigned = {tp.partition for tp in consumer.assignment()}
            handshake.consumer_side()
            tp = TopicPartition("t1", 0)
            consumer.commit({tp: OffsetAndMetadata(7, "", -1)})
            return assigned, consumer.committed(tp)
        finally:
            consumer.close()

    thread = asyncio.ensure_future(asyncio.to_thread(run))
    await handshake.test_side(
        thread, lambda: _assert_one_member_owns_t1(client, "g-kp", "kp", "range")
    )
    assigned, committed_offset = await thread
    assert (assigned, committed_offset) == ({0, 1, 2}, 7)
    await _assert_left_with_commit(client, "g-kp", 0, 7)


async def test_aiokafka_consumer(node: RunningNode, client: KafkaTestClient) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        "t1",
        bootstrap_servers=f"127.0.0.1:{node.port}",
        group_id="g-ak",
        client_id="ak",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=100)
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
        await _assert_one_member_owns_t1(client, "g-ak", "ak", "roundrobin")
        tp = TopicPartition("t1", 1)
        await consumer.commit({tp: 11})
        assert await consumer.committed(tp) == 11
    finally:
        await consumer.stop()
    await _assert_left_with_commit(client, "g-ak", 1, 11)


async def test_confluent_kafka_consumer(node: RunningNode, client: KafkaTestClient) -> None:
    from confluent_kafka import Consumer, TopicPartition

    errors: list[str] = []
    handshake = Handshake()

    def run() -> tuple[set[int], int]:
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{node.port}",
                "group.id": "g-ck",
                "client.id": "ck",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "fetch.wait.max.ms": 100,
                "error_cb": lambda e: errors.append(str(e)),
            }
        )
        try:
            consumer.subscribe(["t1"])
            deadline = time.monotonic() + DEADLINE_S
            while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
                consumer.poll(0.1)
            assigned = {tp.partition for tp in consumer.assignment()}
            handshake.consumer_side()
            consumer.commit(offsets=[TopicPartition("t1", 2, 5)], asynchronous=False)
            (committed_tp,) = consumer.committed([TopicPartition("t1", 2)], timeout=10)
            return assigned, committed_tp.offset
        finally:
            consumer.close()

    thread = asyncio.ensure_future(asyncio.to_thread(run))
    await handshake.test_side(
        thread, lambda: _assert_one_member_owns_t1(client, "g-ck", "ck", "range")
    )
    assigned, committed_offset = await thread
    assert (assigned, committed_offset) == ({0, 1, 2}, 5)
    assert errors == []
    await _assert_left_with_commit(client, "g-ck", 2, 5)
