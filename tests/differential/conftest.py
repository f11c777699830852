"""The differential conformance suite: the same raw-protocol scenarios against Apache Kafka's own
broker (kafka_2.13 4.x, KRaft, one node; the session fixture `apache_kafka_broker` of
tests/conftest.py) and against a `coordinator serve` node, in one run.

One broker and one node per test session (every scenario uses group ids of its own). Both sides
get the same topic, the same initial rebalance delay (300 ms) and Kafka's default session timeout
bounds (6 s to 30 min). Java or Maven missing, or the broker failing to start, fails the suite.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.differential.scenarios import PARTITIONS, TOPIC, Target
from tests.support.kafka_broker import KafkaBroker, wait_for_coordinator
from tests.support.nodes import CoordinatorProcess

DELAY_MS = 300


@pytest.fixture(scope="session")
def apache_kafka(apache_kafka_broker: KafkaBroker) -> Target:
    return Target("kafka", apache_kafka_broker.address)


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
    try:
        wait_for_coordinator(node.address)
        yield Target("coordinator", node.address)
    finally:
        node.kill()
