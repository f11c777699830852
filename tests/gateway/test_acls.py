"""Our ACLs on relayed requests, with real clients and a real upstream: a principal without TOPIC
WRITE cannot produce, without READ cannot fetch, without DESCRIBE does not see the topic — and
the upstream never sees the refused requests (its log end offset stays put, and the gateway
counts them as answered here, not relayed). The gateway's own upstream principal is never lent."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.gateway.conftest import gateway_process
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.secure import add_acl, set_user

pytestmark = pytest.mark.timeout(240)

PASSWORD = "gateway-acl-secret"
MECHANISM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def logged_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """An upstream of this module's own that logs every request it completes, by client id."""
    broker = KafkaBroker(tmp_path_factory.mktemp("logged-kafka"), request_log=True)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def secured(tmp_path: Path, logged_broker: KafkaBroker) -> Iterator[tuple[CoordinatorProcess, str]]:
    """A gateway whose one listener is SASL_PLAINTEXT with our ACL authorizer, and a topic on
    the upstream: alice may produce to and read it, bob may only DESCRIBE it, carol nothing."""
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    logged_broker.create_topic(topic, 2)
    proc = gateway_process(
        tmp_path / "gw",
        logged_broker,
        COORD_AUTHORIZER="acl",
        COORD_SUPER_USERS="User:admin",
        COORD_SASL_ENABLED_MECHANISMS=MECHANISM,
    )
    proc.env_overrides["COORD_LISTENERS"] = f"SASL_PLAINTEXT://127.0.0.1:{proc.kafka_port}"
    proc.start()
    try:
        for user in ("alice", "bob", "carol"):
            set_user(proc.db_url, user, PASSWORD, MECHANISM)
        for user in ("alice", "bob", "carol"):
            add_acl(
                proc.db_url,
                f"--principal=User:{user}",
                "--operation=READ",
                "--resource-type=GROUP",
                "--resource-name=*",
            )
        for op in ("WRITE", "READ"):
            add_acl(
                proc.db_url,
                "--principal=User:alice",
                f"--operation={op}",
                "--resource-type=TOPIC",
                f"--resource-name={topic}",
            )
        add_acl(
            proc.db_url,
            "--principal=User:bob",
            "--operation=DESCRIBE",
            "--resource-type=TOPIC",
            f"--resource-name={topic}",
        )
        time.sleep(1.5)  # the node reads the stored ACLs every 0.5 s
        yield proc, topic
    finally:
        proc.kill()


def client_config(proc: CoordinatorProcess, user: str, client_id: str = "") -> dict[str, object]:
    return {
        "bootstrap.servers": proc.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": PASSWORD,
        "client.id": client_id or f"{user}-{uuid.uuid4().hex[:6]}",
    }


def produce(proc: CoordinatorProcess, user: str, topic: str, n: int) -> list[KafkaError | None]:
    config = {**client_config(proc, user, f"{user}-producer"), "acks": "all"}
    producer = Producer({**config, "message.timeout.ms": 15_000})
    outcomes: list[KafkaError | None] = []
    for i in range(n):
        producer.produce(
            topic,
            value=f"{user}-{i}".encode(),
            partition=i % 2,
            on_delivery=lambda err, _msg: outcomes.append(err),
        )
    producer.flush(30)
    return outcomes


def log_end(broker: KafkaBroker, topic: str) -> int:
    """The upstream's own count of the topic's records, asked directly."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "never-joins"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(2)
        )
    finally:
        c.close()


def gateway_counter(proc: CoordinatorProcess, family: str, api: str) -> float:
    with urllib.request.urlopen(proc.admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = f'{family}_total{{api="{api}"}} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def test_write_read_and_describe_are_ours_to_grant(
    secured: tuple[CoordinatorProcess, str], logged_broker: KafkaBroker
) -> None:
    proc, topic = secured
    assert produce(proc, "alice", topic, 10) == [None] * 10
    assert log_end(logged_broker, topic) == 10

    relayed_before = gateway_counter(proc, "coordinator_gateway_relayed_requests", "Produce")
    outcomes = produce(proc, "bob", topic, 5)  # bob sees the topic but may not write
    assert len(outcomes) == 5
    assert all(
        e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in outcomes
    ), outcomes
    assert log_end(logged_broker, topic) == 10  # not one of bob's records reached it
    assert gateway_counter(proc, "coordinator_gateway_denied_requests", "Produce") >= 1
    assert gateway_counter(proc, "coordinator_gateway_relayed_requests", "Produce") == (
        relayed_before
    )

    # alice reads all ten through her group; bob's fetch is refused with Kafka's error
    alice = Consumer(
        {
            **client_config(proc, "alice", "alice-consumer"),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    alice.assign([TopicPartition(topic, p, 0) for p in range(2)])
    read = []
    deadline = time.monotonic() + 60
    while len(read) < 10 and time.monotonic() < deadline:
        msg = alice.poll(0.5)
        if msg is not None and msg.error() is None:
            read.append(msg.value())
    alice.close()
    assert sorted(read) == sorted(f"alice-{i}".encode() for i in range(10))

    denied_fetches = gateway_counter(proc, "coordinator_gateway_denied_requests", "Fetch")
    bob = Consumer(
        {
            **client_config(proc, "bob", "bob-consumer"),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    bob.assign([TopicPartition(topic, p, 0) for p in range(2)])
    errors = []
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        msg = bob.poll(0.5)
        if msg is not None:
            assert msg.error() is not None, "bob read a record he may not read"
            errors.append(msg.error().code())
    bob.close()
    assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert gateway_counter(proc, "coordinator_gateway_denied_requests", "Fetch") > denied_fetches

    # the upstream's own request log: alice's requests reached it, bob's refused ones never did
    assert "Produce" in logged_broker.requests_from("alice-producer")
    assert "Fetch" in logged_broker.requests_from("alice-consumer")
    assert "Metadata" in logged_broker.requests_from("bob-producer")  # what he may see, he does
    assert "Produce" not in logged_broker.requests_from("bob-producer")
    assert "Fetch" not in logged_broker.requests_from("bob-consumer")

    # carol may not DESCRIBE it: the upstream's Metadata reaches her without the topic
    topics = AdminClient(client_config(proc, "carol")).list_topics(timeout=15).topics
    assert topic not in topics
    assert topic in AdminClient(client_config(proc, "bob")).list_topics(timeout=15).topics
