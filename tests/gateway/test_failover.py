"""Two gateway nodes on one PostgreSQL store, a producer and a static group running through
them, and a kill -9 of the node that coordinates the group: produce and consume resume through
the survivor within the lease TTL plus a few seconds, no acked record is lost or skipped, and no
committed offset goes back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.gateway.conftest import gateway_process
from tests.gateway.test_records import commit, consumer
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess, postgres_nodes

pytestmark = pytest.mark.timeout(300)

TTL_MS = 3000
RATE = 100  # records a second
MOST = 6000  # the producer stops there at the latest
PARTITIONS = 3


@pytest.fixture
def gateways(
    pg_admin_dsn: str, tmp_path: Path, apache_kafka_broker: KafkaBroker
) -> Iterator[list[CoordinatorProcess]]:
    def make(url: str, node_id: int) -> CoordinatorProcess:
        return gateway_process(
            tmp_path / f"gw{node_id}",
            apache_kafka_broker,
            db_url=url,
            COORD_NODE_ID=str(node_id),
            COORD_LEASE_TTL_MS=str(TTL_MS),
        )

    with postgres_nodes(pg_admin_dsn, tmp_path, {}, prefix="gateway", make=make) as nodes:
        yield nodes


class Producing(threading.Thread):
    """Numbered records at RATE a second until stopped; `acked` holds the ones the upstream
    acknowledged (through the gateway), with the time of each ack."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120_000,
            }
        )
        self.topic = topic
        self.acked: dict[str, float] = {}
        self.failed: list[Any] = []
        self.done = threading.Event()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.acked[msg.value().decode()] = time.monotonic()

    def run(self) -> None:
        for i in range(MOST):
            if self.done.is_set():
                break
            self.producer.produce(
                self.topic, value=f"record-{i}".encode(), on_delivery=self._delivered
            )
            self.producer.poll(1 / RATE)
        self.producer.flush(120)


def coordinator_of(bootstrap: str, group: str) -> int:
    """The node id (COORD_NODE_ID) of the group's coordinator, as a client finds it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (description,) = admin.describe_consumer_groups([group], request_timeout=15).values()
    return int(description.result().coordinator.id) - 1_000_000_000


def committed(c: Any, topic: str) -> dict[int, int]:
    tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    return {tp.partition: tp.offset for tp in tps}


def test_a_kill_9_of_the_coordinating_gateway_loses_and_skips_nothing(
    gateways: list[CoordinatorProcess], apache_kafka_broker: KafkaBroker
) -> None:
    topic = f"fo-{int(time.time() * 1000) % 10**8}"
    apache_kafka_broker.create_topic(topic, PARTITIONS)
    bootstrap = ",".join(n.bootstrap for n in gateways)
    group = f"{topic}-group"
    producing = Producing(bootstrap, topic)
    consumers = [
        consumer(bootstrap, group, f"worker-{i}", **{"session.timeout.ms": 30_000})
        for i in range(3)
    ]
    seen: dict[str, float] = {}
    killed_at = 0.0
    try:
        for c in consumers:
            c.subscribe([topic])
        producing.start()

        def poll_until(done: Any, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not done() and time.monotonic() < deadline:
                for c in consumers:
                    msg = c.poll(0.1)
                    if msg is None or msg.error() is not None:
                        continue
                    seen.setdefault(msg.value().decode(), time.monotonic())
                    commit(c, msg, timeout=60)

        poll_until(lambda: len(seen) >= 300, 90)
        assert len(seen) >= 300, f"only {len(seen)} records read before the kill"
        owner = coordinator_of(bootstrap, group)
        before = committed(consumers[0], topic)
        victim = next(n for n in gateways if n.node_id == owner)
        survivor = next(n for n in gateways if n is not victim)
        victim.kill()
        killed_at = time.monotonic()
        acked_at_kill = len(producing.acked)
        # consume on until well after the kill, then until every acked record is read
        poll_until(lambda: time.monotonic() - killed_at > 20, 30)
        producing.done.set()
        producing.join(150)
        poll_until(lambda: set(producing.acked) <= set(seen), 120)
        after = committed(consumers[0], topic)
    finally:
        producing.done.set()
        for c in consumers:
            c.close()
    missing = set(producing.acked) - set(seen)
    assert not missing, f"{len(missing)} acked records never consumed, e.g. {sorted(missing)[:5]}"
    assert producing.failed == []
    assert all(after[p] >= before[p] for p in range(PARTITIONS)), (before, after)
    # both sides carried on through the survivor: records acked and read after the kill, soon
    acked_after = sorted(t for t in producing.acked.values() if t > killed_at)
    read_after = sorted(t for t in seen.values() if t > killed_at)
    assert len(producing.acked) > acked_at_kill and acked_after and read_after
    resume = max(acked_after[0], read_after[0]) - killed_at
    print(f"produce and consume resumed {resume:.1f} s after the kill (TTL {TTL_MS / 1000} s)")
    assert resume < TTL_MS / 1000 + 15, f"resumed only {resume:.1f} s after the kill"
    assert coordinator_of(survivor.bootstrap, group) == survivor.node_id
