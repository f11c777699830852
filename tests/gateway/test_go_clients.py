"""Go's Kafka clients through gateway nodes: franz-go's group consumer (kgo) and IBM/sarama's
ConsumerGroup (tests/go/cmd, built by tests/support/go.py), with each eager balancer and the
cooperative-sticky one. Their groups form here with the chosen assignor, every record
produced is consumed and its offset committed (read back from the node's REST API), nothing
is lost and no partition is owned by two live members at once when a member leaves, when the
coordinating gateway node is killed -9 (two nodes on one PostgreSQL), or when a static
member (`InstanceID`, `Consumer.Group.InstanceId`) restarts, which moves nobody else."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.gateway.test_failover import Producing, coordinator_of, gateways  # noqa: F401
from tests.gateway.test_records import produce
from tests.support.go import GoConsumer, go_build, ownership_overlaps, wait_for  # noqa: F401
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess

pytestmark = pytest.mark.timeout(420)

PARTITIONS = 6
N = 600
BALANCERS = ("range", "roundrobin", "sticky", "cooperative-sticky")
CLIENTS = ("kgoconsumer", "saramaconsumer")
# in make test: kgo's cooperative and Sarama's eager group; the rest in make verify
FAST = {("kgoconsumer", "cooperative-sticky"), ("saramaconsumer", "range")}


def case(command: str, balancer: str) -> Any:
    marks = () if (command, balancer) in FAST else (pytest.mark.verify,)
    return pytest.param(command, balancer, id=f"{command}-{balancer}", marks=marks)


def new_topic(broker: KafkaBroker, partitions: int = PARTITIONS) -> str:
    name = f"go-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions)
    return name


def values(start: int, n: int) -> set[str]:
    return {f"record-{i}" for i in range(start, start + n)}


def consumed(members: list[GoConsumer]) -> set[str]:
    return set().union(*(m.values() for m in members))


def describe(node: CoordinatorProcess, group: str) -> dict[str, Any] | None:
    try:
        g: dict[str, Any] = node.get(f"/groups/{group}", timeout=10)
        return g
    except (OSError, ValueError):  # not there yet, or the node moving
        return None


def settled(
    node: CoordinatorProcess, group: str, members: list[GoConsumer], partitions: int = PARTITIONS
) -> Callable[[], bool]:
    """The group Stable here with exactly these members, and every partition owned by
    exactly one of them by their own events."""

    def done() -> bool:
        g = describe(node, group)
        if g is None or g["state"] != "Stable" or len(g["members"]) != len(members):
            return False
        owned = [p for m in members for p in m.owned()]
        return len(owned) == len(set(owned)) == partitions

    return done


def committed_total(node: CoordinatorProcess, group: str, topic: str) -> int:
    """The sum of the group's committed offsets of `topic`, as the node's REST API says."""
    try:
        offsets = node.get(f"/groups/{group}/offsets", timeout=10)
    except (OSError, ValueError):
        return -1
    return sum(int(o["offset"]) for o in offsets if o["topic"] == topic)


def log_end_total(broker: KafkaBroker, topic: str, partitions: int) -> int:
    """The records in `topic` on the upstream (the sum of its log-end offsets)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "go-watermarks"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        )
    finally:
        c.close()


def stop_all(members: list[GoConsumer]) -> None:
    for m in members:
        m.stop()


def check_clean(members: list[GoConsumer]) -> None:
    overlaps = ownership_overlaps(members)
    assert not overlaps, "\n".join(overlaps) + "\n" + "\n".join(m.tail() for m in members)


@pytest.mark.parametrize(("command", "balancer"), [case(c, b) for c in CLIENTS for b in BALANCERS])
def test_a_group_consumes_and_commits_every_record_and_a_leaving_member_loses_none(
    go_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    tmp_path: Path,
    command: str,
    balancer: str,
) -> None:
    node = gateway_factory()
    topic = new_topic(apache_kafka_broker)
    group = f"{topic}-{balancer}"
    members = [
        GoConsumer(command, tmp_path, node.bootstrap, group, topic, f"m{i}", balancer=balancer)
        for i in range(3)
    ]
    try:
        wait_for(settled(node, group, members), 120, "the group formed", *members)
        g = describe(node, group)
        assert g is not None and g["protocol_type"] == "consumer"
        assert g["protocol_name"] == balancer  # the client's assignor, chosen here
        produce(node.bootstrap, topic, N)
        wait_for(lambda: values(0, N) <= consumed(members), 120, "every record read", *members)
        # a member leaves: its partitions move to the two others, nothing is lost
        members[2].stop()
        wait_for(settled(node, group, members[:2]), 120, "the group rebalanced", *members)
        produce(node.bootstrap, topic, N, start=N)
        wait_for(lambda: values(0, 2 * N) <= consumed(members), 120, "every record read", *members)
        wait_for(
            lambda: committed_total(node, group, topic) == 2 * N,
            60,
            f"the commits reached the log end ({committed_total(node, group, topic)})",
            *members,
        )
    finally:
        stop_all(members)
    assert log_end_total(apache_kafka_broker, topic, PARTITIONS) == 2 * N
    check_clean(members)
    # each member committed what it read before its partitions moved: nothing read twice
    reads = Counter(e["value"] for m in members for e in m.named("record"))
    twice = sorted(v for v, n in reads.items() if n > 1)
    assert not twice, f"{len(twice)} records read twice, e.g. {twice[:5]}"


@pytest.mark.parametrize(
    ("command", "balancer"),
    [
        # make verify only: once under make test's load the idempotent producer's InitProducerId
        # (relayed) was answered COORDINATOR_LOAD_IN_PROGRESS for 90 s by the upstream broker,
        # whose producer-id manager says so while the controller owes it a block of ids
        pytest.param(
            "kgoconsumer",
            "cooperative-sticky",
            marks=pytest.mark.verify,
            id="kgoconsumer-cooperative-sticky",
        ),
        case("saramaconsumer", "range"),
        pytest.param("kgoconsumer", "range", marks=pytest.mark.verify, id="kgoconsumer-range"),
        pytest.param(
            "saramaconsumer",
            "cooperative-sticky",
            marks=pytest.mark.verify,
            id="saramaconsumer-cooperative-sticky",
        ),
    ],
)
def test_a_kill_9_of_the_coordinating_gateway_loses_nothing_and_owns_nothing_twice(
    go_build: None,  # noqa: F811
    gateways: list[CoordinatorProcess],  # noqa: F811
    apache_kafka_broker: KafkaBroker,
    tmp_path: Path,
    command: str,
    balancer: str,
) -> None:
    topic = new_topic(apache_kafka_broker, 3)
    bootstrap = ",".join(n.bootstrap for n in gateways)
    group = f"{topic}-group"
    producing = Producing(bootstrap, topic)
    # a session longer than the failover (lease TTL, then the group's load on the survivor)
    members = [
        GoConsumer(
            command,
            tmp_path,
            bootstrap,
            group,
            topic,
            f"m{i}",
            balancer=balancer,
            session_timeout_ms=30_000,
        )
        for i in range(3)
    ]
    try:
        wait_for(settled(gateways[0], group, members, 3), 120, "the group formed", *members)
        producing.start()
        wait_for(lambda: len(consumed(members)) >= 300, 90, "300 records read", *members)
        owner = coordinator_of(bootstrap, group)
        victim = next(n for n in gateways if n.node_id == owner)
        survivor = next(n for n in gateways if n is not victim)
        victim.kill()
        killed_at = time.time()
        time.sleep(20)  # produce and consume on through the survivor
        producing.done.set()
        producing.join(150)
        assert not producing.is_alive() and producing.failed == []
        acked = set(producing.acked)
        wait_for(lambda: acked <= consumed(members), 150, "every acked record read", *members)
        end = log_end_total(apache_kafka_broker, topic, 3)
        wait_for(
            lambda: committed_total(survivor, group, topic) == end,
            90,
            f"the commits reached the log end {end} on the survivor",
            *members,
        )
        assert all(m.alive for m in members), "\n".join(m.tail() for m in members)
        read_after = [e for m in members for e in m.named("record") if e["t"] > killed_at]
        assert read_after, "nothing read after the kill"
    finally:
        producing.done.set()
        stop_all(members)
    check_clean(members)
    assert coordinator_of(survivor.bootstrap, group) == survivor.node_id


def rebalanced_since(m: GoConsumer, since: float) -> list[dict[str, Any]]:
    return [e for e in m.named("assigned", "revoked", "lost") if e["t"] > since]


@pytest.mark.parametrize(
    ("command", "balancer"),
    [
        case("kgoconsumer", "range"),
        case("kgoconsumer", "cooperative-sticky"),
        case("saramaconsumer", "range"),
        pytest.param(
            "saramaconsumer",
            "cooperative-sticky",
            marks=pytest.mark.verify,
            id="saramaconsumer-cooperative-sticky",
        ),
    ],
)
def test_a_static_members_restart_moves_nobody_and_loses_nothing(
    go_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    tmp_path: Path,
    command: str,
    balancer: str,
) -> None:
    node = gateway_factory()
    topic = new_topic(apache_kafka_broker)
    group = f"{topic}-static"

    def member(i: int, name: str) -> GoConsumer:
        return GoConsumer(
            command,
            tmp_path,
            node.bootstrap,
            group,
            topic,
            name,
            balancer=balancer,
            instance=f"w{i}",
            session_timeout_ms=30_000,
        )

    members = [member(i, f"w{i}") for i in range(3)]
    again: GoConsumer | None = None
    try:
        wait_for(settled(node, group, members), 120, "the group formed", *members)
        time.sleep(2)  # no rebalance still to come
        g = describe(node, group)
        assert g is not None
        generation = g["generation"]
        assert sorted(m["group_instance_id"] for m in g["members"]) == ["w0", "w1", "w2"]
        produce(node.bootstrap, topic, N)
        wait_for(lambda: values(0, N) <= consumed(members), 120, "every record read", *members)
        owned_before = members[1].owned()
        quiet_since = time.time()
        members[1].kill()  # no LeaveGroup: a static member's crash
        again = member(1, "w1-again")
        wait_for(lambda: again.owned() == owned_before, 60, "the restart's partitions", again)
        produce(node.bootstrap, topic, N, start=N)
        everyone = [*members, again]
        wait_for(
            lambda: values(0, 2 * N) <= consumed(everyone), 120, "every record read", *everyone
        )
        wait_for(
            lambda: committed_total(node, group, topic) == 2 * N,
            60,
            "the commits reached the log end",
            *everyone,
        )
        g = describe(node, group)
        assert g is not None and g["state"] == "Stable"
        assert g["generation"] == generation, "the restart rebalanced the group"
        for m in (members[0], members[2]):
            assert rebalanced_since(m, quiet_since) == [], m.tail()
    finally:
        stop_all([*members, *([again] if again else [])])
    check_clean([*members, again])


def test_a_client_newer_than_the_gateway_learns_every_relayed_api(
    gateway_factory: Callable[..., CoordinatorProcess],
) -> None:
    """franz-go asks ApiVersions v5 first; KIP-511's UNSUPPORTED_VERSION reply must list what
    the gateway relays, since franz-go takes a reply with every key as the table (it had
    the coordinator's own, and refused CreateTopics and InitProducerId as too new)."""
    node = gateway_factory()

    def api_versions(version: int) -> tuple[int, dict[int, tuple[int, int]]]:
        body = b"\x02x\x021\x00"  # client software name and version, no tagged fields
        header = struct.pack(">hhih", 18, version, 7, 1) + b"t\x00"
        with socket.create_connection(node.address, timeout=10) as s:
            s.sendall(struct.pack(">i", len(header + body)) + header + body)
            size = struct.unpack(">i", recv(s, 4))[0]
            data = recv(s, size)
        # v0's layout for an unknown version (int32 array); the flexible v3+ layout else
        if version > 4:
            error, count = struct.unpack_from(">hi", data, 4)
            pos, step = 10, 6
        else:
            error, count = struct.unpack_from(">h", data, 4)[0], data[6] - 1  # < 127 keys
            pos, step = 7, 7
        keys = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", data, pos + i * step)
            keys[key] = (lo, hi)
        return error, keys

    error, newer = api_versions(5)
    assert error == 35  # UNSUPPORTED_VERSION
    ok, current = api_versions(4)
    assert ok == 0
    assert 19 in newer and 22 in newer  # CreateTopics and InitProducerId, relayed
    assert newer == current


def recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
