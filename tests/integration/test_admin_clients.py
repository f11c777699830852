"""AdminClient parity against a real `coordinator serve` process: confluent-kafka's AdminClient
and kafka-python's KafkaAdminClient, each call a user makes about consumer groups, checked by
what the user sees.

confluent-kafka 2.16 has no delete_consumer_group_offsets: that call is kafka-python's alone.
The node registers topics t6 (6 partitions) and `other` (2), see tests/integration/conftest.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import GroupIdNotFoundError, NoError
from kafka.structs import OffsetAndMetadata

from tests.integration.conftest import E2E

TIMEOUT = 30.0


def admin(e2e: E2E) -> AdminClient:
    return AdminClient({"bootstrap.servers": e2e.coord.bootstrap})


@pytest.fixture
def kp_admin(e2e: E2E) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=e2e.coord.bootstrap, request_timeout_ms=20_000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def stable(e2e: E2E) -> Iterator[CkConsumer]:
    """One confluent-kafka consumer in group `adm-stable`, subscribed to t6 and assigned."""
    consumer = CkConsumer(
        {
            "bootstrap.servers": e2e.coord.bootstrap,
            "group.id": "adm-stable",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
        }
    )
    consumer.subscribe(["t6"])
    deadline = time.monotonic() + TIMEOUT
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer never got an assignment"
        consumer.poll(0.2)
    try:
        yield consumer
    finally:
        consumer.close()


def set_offsets(client: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    )
    result = client.alter_consumer_group_offsets([request])[group].result(TIMEOUT)
    assert {(tp.topic, tp.partition): tp.error for tp in result.topic_partitions} == {
        tp: None for tp in offsets
    }


def ck_offsets(client: AdminClient, group: str) -> dict[tuple[str, int], int]:
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    listed = result[group].result(TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions}


def kp_offsets(client: KafkaAdminClient, group: str) -> dict[tuple[str, int], int]:
    result: dict[str, dict[Any, Any]] = client.list_group_offsets({group: None})
    return {(tp.topic, tp.partition): om.offset for tp, om in result[group].items()}


# --- list and describe -------------------------------------------------------------------------


def test_confluent_list_and_describe(e2e: E2E, stable: CkConsumer) -> None:
    client = admin(e2e)
    set_offsets(client, "adm-empty", {("t6", 0): 3})  # a simple group: Empty

    def listed(**kw: Any) -> dict[str, Any]:
        result = client.list_consumer_groups(request_timeout=TIMEOUT, **kw).result(TIMEOUT)
        assert result.errors == []
        return {g.group_id: g for g in result.valid}

    groups = listed()
    assert {g: listed_group.state for g, listed_group in groups.items()} == {
        "adm-stable": ConsumerGroupState.STABLE,
        "adm-empty": ConsumerGroupState.EMPTY,
    }
    assert groups["adm-empty"].is_simple_consumer_group
    assert not groups["adm-stable"].is_simple_consumer_group
    assert {g.type for g in groups.values()} == {ConsumerGroupType.CLASSIC}
    assert set(listed(states={ConsumerGroupState.STABLE})) == {"adm-stable"}
    assert set(listed(states={ConsumerGroupState.EMPTY})) == {"adm-empty"}
    assert set(listed(types={ConsumerGroupType.CLASSIC})) == {"adm-stable", "adm-empty"}
    assert set(listed(types={ConsumerGroupType.CONSUMER})) == set()

    described = client.describe_consumer_groups(["adm-stable", "adm-empty"])
    group = described["adm-stable"].result(TIMEOUT)
    assert group.state == ConsumerGroupState.STABLE
    assert group.partition_assignor == "range"
    assert (group.coordinator.host, group.coordinator.port) == e2e.coord.address
    (member,) = group.members
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == list(range(6))
    assert {tp.topic for tp in member.assignment.topic_partitions} == {"t6"}
    empty = described["adm-empty"].result(TIMEOUT)
    assert (empty.state, empty.members) == (ConsumerGroupState.EMPTY, [])


def test_kafka_python_list_and_describe(
    e2e: E2E, stable: CkConsumer, kp_admin: KafkaAdminClient
) -> None:
    set_offsets(admin(e2e), "adm-empty", {("t6", 0): 3})
    groups = {g["group_id"]: g for g in kp_admin.list_groups()}
    assert {g: v.get("group_state") for g, v in groups.items()} == {
        "adm-stable": "Stable",
        "adm-empty": "Empty",
    }
    stable_only = kp_admin.list_groups(states_filter=["Stable"])
    assert [g["group_id"] for g in stable_only] == ["adm-stable"]
    classic = kp_admin.list_groups(types_filter=["classic"])
    assert {g["group_id"] for g in classic} == {"adm-stable", "adm-empty"}
    assert kp_admin.list_groups(types_filter=["consumer"]) == []

    described = kp_admin.describe_groups(["adm-stable"])
    group = described["adm-stable"]
    assert group["group_state"] == "Stable"
    assert group["protocol_type"] == "consumer"
    assert group["protocol_data"] == "range"
    (member,) = group["members"]
    assignment = member["member_assignment"]
    partitions = sorted(p for t in assignment["assigned_partitions"] for p in t["partitions"])
    assert partitions == list(range(6))


# --- offsets -----------------------------------------------------------------------------------


def test_confluent_offsets_on_an_empty_group(e2e: E2E) -> None:
    client = admin(e2e)
    set_offsets(client, "adm-offsets", {("t6", 0): 10, ("t6", 5): 15, ("other", 1): 2})
    assert ck_offsets(client, "adm-offsets") == {("t6", 0): 10, ("t6", 5): 15, ("other", 1): 2}
    set_offsets(client, "adm-offsets", {("t6", 0): 0})  # a reset to the start
    assert ck_offsets(client, "adm-offsets")[("t6", 0)] == 0


def test_kafka_python_offsets_alter_list_delete(e2e: E2E, kp_admin: KafkaAdminClient) -> None:
    altered = kp_admin.alter_group_offsets(
        "adm-kp",
        {
            KpTopicPartition("t6", 1): OffsetAndMetadata(7, "", -1),
            KpTopicPartition("other", 0): OffsetAndMetadata(9, "", -1),
        },
    )
    assert set(altered.values()) == {NoError}
    assert kp_offsets(kp_admin, "adm-kp") == {("t6", 1): 7, ("other", 0): 9}
    deleted = kp_admin.delete_group_offsets("adm-kp", [KpTopicPartition("t6", 1)])
    assert deleted == {KpTopicPartition("t6", 1): NoError}
    assert kp_offsets(kp_admin, "adm-kp") == {("other", 0): 9}
    with pytest.raises(GroupIdNotFoundError):
        kp_admin.delete_group_offsets("adm-nobody", [KpTopicPartition("t6", 1)])
    # the deletion is durable: still gone after a restart of the node (fresh clients: the old
    # one's connection died with the process)
    e2e.coord.restart()
    assert ck_offsets(admin(e2e), "adm-kp") == {("other", 0): 9}
    fresh = KafkaAdminClient(bootstrap_servers=e2e.coord.bootstrap, request_timeout_ms=20_000)
    try:
        assert kp_offsets(fresh, "adm-kp") == {("other", 0): 9}
    finally:
        fresh.close()


def test_delete_offsets_of_an_active_group(
    e2e: E2E, stable: CkConsumer, kp_admin: KafkaAdminClient
) -> None:
    stable.commit(offsets=[TopicPartition("t6", 2, 4)], asynchronous=False)
    set_offsets_while_active = kp_admin.alter_group_offsets(
        "adm-stable", {KpTopicPartition("other", 0): OffsetAndMetadata(1, "", -1)}
    )
    # an admin commit to a group with members is refused, as Kafka does
    assert set(set_offsets_while_active.values()) != {NoError}
    result = kp_admin.delete_group_offsets("adm-stable", [KpTopicPartition("t6", 2)])
    assert result[KpTopicPartition("t6", 2)].errno == 86  # GROUP_SUBSCRIBED_TO_TOPIC
    assert kp_offsets(kp_admin, "adm-stable") == {("t6", 2): 4}


# --- delete groups -----------------------------------------------------------------------------


def test_delete_consumer_groups(e2e: E2E, stable: CkConsumer, kp_admin: KafkaAdminClient) -> None:
    client = admin(e2e)
    set_offsets(client, "adm-del-ck", {("t6", 0): 1})
    set_offsets(client, "adm-del-kp", {("t6", 0): 1})
    futures = client.delete_consumer_groups(["adm-del-ck", "adm-stable"], request_timeout=TIMEOUT)
    futures["adm-del-ck"].result(TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        futures["adm-stable"].result(TIMEOUT)
    assert refused.value.args[0].code() == 68  # NON_EMPTY_GROUP
    # kafka-python 3 answers a dict of group id -> "OK" or the error's class name
    results = dict(kp_admin.delete_groups(["adm-del-kp", "adm-ghost"]))
    assert results == {"adm-del-kp": "OK", "adm-ghost": "GroupIdNotFoundError"}
    remaining = {g["group_id"] for g in kp_admin.list_groups()}
    assert remaining == {"adm-stable"}
    assert ck_offsets(client, "adm-del-ck") == {}  # the offsets went with the group


# --- describe cluster --------------------------------------------------------------------------


def test_describe_cluster(e2e: E2E, kp_admin: KafkaAdminClient) -> None:
    client = admin(e2e)
    result = client.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert result.cluster_id
    assert [(n.host, n.port) for n in result.nodes] == [e2e.coord.address]
    assert result.controller is not None
    assert result.controller.id == result.nodes[0].id
    assert result.authorized_operations  # no authorizer: every cluster operation

    described = kp_admin.describe_cluster()
    assert described["cluster_id"] == result.cluster_id
    assert described["controller_id"] == result.controller.id
    brokers = [(b["host"], b["port"]) for b in described["brokers"]]
    assert brokers == [e2e.coord.address]
    # DescribeCluster v2 answered (kafka-python falls back to Metadata, which has no is_fenced)
    assert [b["is_fenced"] for b in described["brokers"]] == [False]
