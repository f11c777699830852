"""Real records through a gateway node: produced and consumed with confluent-kafka, the group
coordinated here, the data on Apache Kafka's broker."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess

pytestmark = pytest.mark.timeout(240)

N = 300


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[Any] = []
    for i in range(start, start + n):
        producer.produce(
            topic,
            key=str(i).encode(),
            value=f"record-{i}".encode(),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(60) == 0, "records still unsent after 60 s"
    assert failures == []


def consumer(bootstrap: str, group: str, instance: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "session.timeout.ms": 10_000,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def commit(c: Consumer, msg: Any, timeout: float = 60) -> None:
    """A synchronous commit, retried while the client says the error is retriable (the
    coordinator moving or restarting: what an application does too)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.commit(message=msg, asynchronous=False)
            return
        except KafkaException as e:
            error = e.args[0]
            waiting = error.code() in (KafkaError._WAIT_COORD, KafkaError._TRANSPORT)
            if not (waiting or error.retriable()) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def consume_all(
    consumers: list[Consumer],
    topic: str,
    want: set[str],
    timeout: float = 90,
    seen: dict[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Poll every consumer in turn until `want` is read (`seen`: what was read before),
    committing what each read."""
    seen = {} if seen is None else seen
    deadline = time.monotonic() + timeout
    while not want.issubset(seen) and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.setdefault(msg.value().decode(), []).append(c.memberid())
            commit(c, msg)
    missing = want - set(seen)
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    return seen


def admin_json(node: CoordinatorProcess, path: str) -> Any:
    with urllib.request.urlopen(node.admin_url + path, timeout=10) as r:
        return json.loads(r.read())


def test_a_static_group_consumes_every_record_through_the_gateway(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
) -> None:
    node = gateway_factory()
    produce(node.bootstrap, topic, N)
    group = f"{topic}-group"
    consumers = [consumer(node.bootstrap, group, f"worker-{i}") for i in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        seen = consume_all(consumers, topic, {f"record-{i}" for i in range(N)})
        assert len(seen) == N
        committed = consumers[0].committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert sum(tp.offset for tp in committed) == N  # every partition committed to its end
    finally:
        for c in consumers:
            c.close()
    # the group is ours: the node describes it, the upstream's coordinator never heard of it
    described = admin_json(node, f"/groups/{group}")
    assert described["state"] in ("Stable", "Empty", "PreparingRebalance", "CompletingRebalance")
    upstream_groups = AdminClient({"bootstrap.servers": apache_kafka_broker.bootstrap})
    listed = upstream_groups.list_consumer_groups(request_timeout=10).result()
    assert group not in {g.group_id for g in listed.valid}
    # the upstream's brokers at their gateway ports
    cluster = admin_json(node, "/cluster")["upstream"]
    assert cluster["reachable"] and cluster["unplaced_broker_ids"] == []
    (broker,) = cluster["brokers"]
    assert broker["gateway"] == f"127.0.0.1:{node.kafka_port + 1 + broker['node_id']}"
    # and the console's cluster page says the same
    with urllib.request.urlopen(node.admin_url + "/ui/cluster", timeout=10) as r:
        page = r.read().decode()
    assert "Upstream Kafka cluster" in page and f">{broker['gateway']}<" in page


def consume_some(consumers: list[Consumer], n: int, seen: dict[str, list[str]]) -> None:
    """Read (and commit) until `n` more records are read."""
    target = len(seen) + n
    deadline = time.monotonic() + 90
    while len(seen) < target and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.setdefault(msg.value().decode(), []).append(c.memberid())
                commit(c, msg)
    assert len(seen) >= target, f"only {len(seen)} of {target} records read"


def test_the_group_resumes_at_its_commits_after_a_kill_9_of_the_gateway(
    gateway_factory: Callable[..., CoordinatorProcess], topic: str
) -> None:
    node = gateway_factory()
    produce(node.bootstrap, topic, N)
    group = f"{topic}-group"
    # a session longer than the restart plus librdkafka's reconnect backoff (up to 10 s): a
    # static member whose session lapsed client-side rejoins without its member id and is
    # fenced by its own registration, with Kafka's coordinator as with ours
    consumers = [
        consumer(node.bootstrap, group, f"worker-{i}", **{"session.timeout.ms": 30_000})
        for i in range(3)
    ]
    seen: dict[str, list[str]] = {}
    try:
        for c in consumers:
            c.subscribe([topic])
        consume_some(consumers, N // 2, seen)
        committed_before = {
            tp.partition: tp.offset
            for tp in consumers[0].committed(
                [TopicPartition(topic, p) for p in range(3)], timeout=10
            )
        }
        node.kill()
        node.start()  # same database, same ports
        produce(node.bootstrap, topic, N, start=N)  # and more records meanwhile
        consume_all(consumers, topic, {f"record-{i}" for i in range(2 * N)}, seen=seen)
        committed_after = {
            tp.partition: tp.offset
            for tp in consumers[0].committed(
                [TopicPartition(topic, p) for p in range(3)], timeout=10
            )
        }
    finally:
        for c in consumers:
            c.close()
    # no record skipped (consume_all checked every one), no commit went back
    assert all(committed_after[p] >= committed_before[p] for p in range(3))
    assert sum(committed_after.values()) == 2 * N
