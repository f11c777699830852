"""Gateway mode against a real upstream: Apache Kafka's own broker (the session's
`apache_kafka_broker`) and coordinator nodes as processes whose COORD_UPSTREAM_BOOTSTRAP names
it, each on a block of ports (its listener, then one per upstream broker id, the defaults)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.kafka_broker import KafkaBroker, KafkaCluster, running
from tests.support.nodes import CoordinatorProcess
from tests.support.ports import free_port_block

BROKER_PORTS = 16  # COORD_GATEWAY_BROKER_PORTS' default: broker ids 0..15


def gateway_process(
    workdir: Path, upstream: KafkaBroker, db_url: str | None = None, **env: str
) -> CoordinatorProcess:
    """A gateway node (not started) on its own block of ports."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = db_url or f"sqlite+aiosqlite:///{workdir / 'coordinator.db'}"
    proc = CoordinatorProcess(
        url,
        workdir,
        {"COORD_UPSTREAM_BOOTSTRAP": upstream.bootstrap, "COORD_TOPICS": "", **env},
        node_id=int(env.get("COORD_NODE_ID", "1")),
    )
    proc.kafka_port = free_port_block(1 + BROKER_PORTS)
    return proc


@pytest.fixture
def gateway_factory(
    tmp_path: Path, apache_kafka_broker: KafkaBroker
) -> Iterator[Callable[..., CoordinatorProcess]]:
    started: list[CoordinatorProcess] = []

    def make(name: str = "gw", **env: str) -> CoordinatorProcess:
        proc = gateway_process(tmp_path / name, apache_kafka_broker, **env)
        proc.start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.kill() if proc.running else None


@pytest.fixture
def topic(apache_kafka_broker: KafkaBroker) -> str:
    """A fresh 3-partition topic on the upstream."""
    name = f"gw-{uuid.uuid4().hex[:8]}"
    apache_kafka_broker.create_topic(name, 3)
    return name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-broker Apache Kafka cluster (replication factor 3), one per module that asks."""
    c = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), request_log=True)
    with running(c, "a three-broker Apache Kafka cluster is needed here"):
        yield c
