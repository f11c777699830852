"""The differential conformance suite: the same raw-protocol scenarios against Apache Kafka's own
broker (kafka_2.13 4.x, KRaft, one node) and against a `coordinator serve` node, in one run.

One broker and one node per test session (both session-scoped; every scenario uses group ids of
its own). Both sides get the same topic, the same initial rebalance delay (300 ms) and Kafka's
default session timeout bounds (6 s to 30 min). Java or Maven missing, or the broker failing to
start, fails the suite loudly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.differential.scenarios import PARTITIONS, TOPIC, Target
from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import CoordinatorProcess

DELAY_MS = 300


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = KafkaBroker(
        tmp_path_factory.mktemp("apache-kafka"), initial_rebalance_delay_ms=DELAY_MS
    )
    try:
        broker.start()
        broker.create_topic(TOPIC, PARTITIONS)
    except BrokerUnavailable as e:
        broker.stop()
        pytest.fail(
            f"Apache Kafka's broker is needed by the differential suite: {e}", pytrace=False
        )
    target = Target("kafka", broker.address)
    asyncio.run(wait_for_coordinator(target))
    try:
        yield target
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    workdir = tmp_path_factory.mktemp("coordinator")
    node = CoordinatorProcess(
        f"sqlite+aiosqlite:///{workdir}/coordinator.db",
        workdir,
        {
            "COORD_TOPICS": f"{TOPIC}:{PARTITIONS}",
            "COORD_INITIAL_REBALANCE_DELAY_MS": str(DELAY_MS),
        },
    )
    node.start()
    target = Target("coordinator", node.address)
    asyncio.run(wait_for_coordinator(target))
    try:
        yield target
    finally:
        node.kill()


async def wait_for_coordinator(target: Target, timeout: float = 60.0) -> None:
    """FindCoordinator until it answers without error: Apache Kafka creates __consumer_offsets on
    the first one, and answers NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE until it is led."""
    c = await KafkaTestClient.connect(*target.address)
    try:
        deadline = time.monotonic() + timeout
        while True:
            reply = await c.find_coordinator("warm-up", version=3)
            if reply.error_code == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{target.name}: FindCoordinator still answers {reply.error_code!r}")
            await asyncio.sleep(0.2)
        # one group formed and left warms the JVM up: a cold broker took the first join of the
        # first scenario so late that the second member was made leader
        joined = await c.join_group("warm-up", version=3)
        await c.sync_group("warm-up", joined.generation_id, joined.member_id, version=3)
        await c.leave_group("warm-up", joined.member_id, version=3)
    finally:
        await c.close()
