"""OffsetDelete (API 47) and DescribeCluster (API 60) on the real node, as Kafka answers them:
KafkaApis.handleOffsetDeleteRequest / OffsetMetadataManager.deleteOffsets, and
handleDescribeCluster on a broker endpoint. Raw requests from `tests/support/kafka_client.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.group.messages import Error
from app.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    all_operations,
)
from tests.protocol.groups import committed, join, stable_group
from tests.protocol.secure_node import SecureNode, sasl_node
from tests.runtime.node_fixture import RunningNode, running_node
from tests.support.kafka_client import KafkaTestClient
from tests.support.ports import free_port

OFFSET_DELETE, DESCRIBE_CLUSTER = 47, 60
INT32_MIN = -(2**31)
PASSWORD = "pw-for-tests"
SCRAM = "SCRAM-SHA-256"


async def offset_delete(
    client: KafkaTestClient, group: str, partitions: Sequence[tuple[str, int]]
) -> Any:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append({"partition_index": p})
    return await client.request(
        client.build_request(
            OFFSET_DELETE,
            0,
            group_id=group,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        )
    )


def errors(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def describe_cluster(client: KafkaTestClient, version: int, **fields: Any) -> Any:
    fields.setdefault("include_cluster_authorized_operations", False)
    if version >= 2:
        fields.setdefault("include_fenced_brokers", False)
    return await client.request(client.build_request(DESCRIBE_CLUSTER, version, **fields))


async def commit(
    client: KafkaTestClient, group: str, offsets: Mapping[tuple[str, int], int]
) -> None:
    resp = await client.offset_commit(group, offsets)
    assert all(e == Error.NONE for e in errors(resp).values()), resp


# --- OffsetDelete ------------------------------------------------------------------------------


async def test_offset_delete_on_an_empty_group(client: KafkaTestClient) -> None:
    await commit(client, "od-empty", {("t1", 0): 5, ("t1", 1): 6, ("t6", 2): 7})
    resp = await offset_delete(client, "od-empty", [("t1", 0), ("t6", 2), ("t6", 3)])
    assert resp.error_code == Error.NONE
    # every partition answered, including one without an offset (as Kafka)
    assert errors(resp) == {("t1", 0): 0, ("t6", 2): 0, ("t6", 3): 0}
    assert await committed(client, "od-empty", [("t1", 0), ("t1", 1), ("t6", 2)]) == [-1, 6, -1]


async def test_offset_delete_unknown_topics_and_partitions(client: KafkaTestClient) -> None:
    await commit(client, "od-unknown", {("t1", 0): 5})
    resp = await offset_delete(client, "od-unknown", [("nope", 0), ("t1", 9), ("t1", 0)])
    assert resp.error_code == Error.NONE
    assert errors(resp) == {
        ("nope", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("t1", 9): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("t1", 0): Error.NONE,
    }


async def test_offset_delete_unknown_group(client: KafkaTestClient) -> None:
    resp = await offset_delete(client, "od-ghost", [("t1", 0)])
    assert resp.error_code == Error.GROUP_ID_NOT_FOUND
    assert list(resp.topics) == []
    resp = await offset_delete(client, "", [("t1", 0)])
    assert resp.error_code == Error.INVALID_GROUP_ID


async def test_offset_delete_active_consumer_group(client: KafkaTestClient) -> None:
    # a simple commit first, then one member subscribed to t1 (never to t6) makes it Stable
    await commit(client, "od-active", {("t1", 0): 5, ("t6", 0): 9})
    await stable_group(client, "od-active")
    resp = await offset_delete(client, "od-active", [("t1", 0), ("t6", 0)])
    assert resp.error_code == Error.NONE
    assert errors(resp) == {("t1", 0): Error.GROUP_SUBSCRIBED_TO_TOPIC, ("t6", 0): Error.NONE}
    assert await committed(client, "od-active", [("t1", 0), ("t6", 0)]) == [5, -1]


async def test_offset_delete_refuses_a_non_consumer_group_with_members(
    client: KafkaTestClient,
) -> None:
    await commit(client, "od-connect", {("t1", 0): 5})
    joined = await join(client, "od-connect", protocol_type="connect")
    assert joined.error_code == Error.NONE
    resp = await offset_delete(client, "od-connect", [("t1", 0)])
    assert resp.error_code == Error.NON_EMPTY_GROUP
    assert await committed(client, "od-connect", [("t1", 0)]) == [5]


async def test_offset_delete_is_a_tombstone_that_survives_a_restart(tmp_path: Path) -> None:
    async with running_node(tmp_path) as n:
        c = await n.client("od-restart")
        await commit(c, "od-durable", {("t1", 0): 5, ("t1", 1): 6})
        await commit(c, "od-gone", {("t6", 0): 1})
        assert errors(await offset_delete(c, "od-durable", [("t1", 0)])) == {("t1", 0): 0}
        assert errors(await offset_delete(c, "od-gone", [("t6", 0)])) == {("t6", 0): 0}
        await c.close()
    async with running_node(tmp_path) as n:
        c = await n.client("od-restart")
        assert await committed(c, "od-durable", [("t1", 0), ("t1", 1)]) == [-1, 6]
        # a group that only had the deleted offset is gone with it
        resp = await offset_delete(c, "od-gone", [("t6", 0)])
        assert resp.error_code == Error.GROUP_ID_NOT_FOUND
        await c.close()


# --- DescribeCluster ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster_lists_this_node(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    resp = await describe_cluster(client, version)
    assert resp.error_code == Error.NONE
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", node.port)]
    assert resp.controller_id == 1
    assert resp.cluster_id
    assert resp.cluster_id == (await client.metadata([], version=12)).cluster_id
    assert resp.cluster_authorized_operations == INT32_MIN  # not asked
    if version >= 1:
        assert resp.endpoint_type == 1
    if version >= 2:
        assert [b.is_fenced for b in resp.brokers] == [False]
    asked = await describe_cluster(client, version, include_cluster_authorized_operations=True)
    assert asked.cluster_authorized_operations == all_operations(ResourceType.CLUSTER)


@pytest.mark.parametrize(("endpoint", "error"), [(2, 114), (0, 115), (7, 115)])
async def test_describe_cluster_endpoint_types(
    client: KafkaTestClient, endpoint: int, error: int
) -> None:
    resp = await describe_cluster(client, 1, endpoint_type=endpoint)
    assert resp.error_code == error
    assert resp.error_message
    assert list(resp.brokers) == []


# --- ACLs --------------------------------------------------------------------------------------


def acl(principal: str, op: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture
async def secure(tmp_path: Path) -> AsyncIterator[SecureNode]:
    async with sasl_node(
        tmp_path,
        ("admin", "team", "reader", "ops"),
        [
            acl("User:team", AclOperation.DELETE, ResourceType.GROUP, "od-acl"),
            acl("User:team", AclOperation.READ, ResourceType.TOPIC, "t1"),
            acl("User:reader", AclOperation.READ, ResourceType.GROUP, "od-acl"),
            acl("User:reader", AclOperation.READ, ResourceType.TOPIC, "t1"),
            acl("User:ops", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
        ],
        password=PASSWORD,
    ) as n:
        yield n


async def sasl_client(node: SecureNode, user: str) -> KafkaTestClient:
    return await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=(SCRAM, user, PASSWORD)
    )


async def test_offset_delete_needs_group_delete_and_topic_read(secure: SecureNode) -> None:
    admin, team, reader = [await sasl_client(secure, u) for u in ("admin", "team", "reader")]
    await commit(admin, "od-acl", {("t1", 0): 1, ("t2", 0): 2})
    # READ on the group is not enough
    resp = await offset_delete(reader, "od-acl", [("t1", 0)])
    assert resp.error_code == Error.GROUP_AUTHORIZATION_FAILED
    assert list(resp.topics) == []
    resp = await offset_delete(team, "od-acl", [("t1", 0), ("t2", 0)])
    assert resp.error_code == Error.NONE
    assert errors(resp) == {("t1", 0): 0, ("t2", 0): Error.TOPIC_AUTHORIZATION_FAILED}
    assert await committed(admin, "od-acl", [("t1", 0), ("t2", 0)]) == [-1, 2]


async def test_describe_cluster_on_the_listener_asked(secure: SecureNode) -> None:
    ops, reader = await sasl_client(secure, "ops"), await sasl_client(secure, "reader")
    resp = await describe_cluster(ops, 1, include_cluster_authorized_operations=True)
    assert [(b.host, b.port) for b in resp.brokers] == [
        ("sasl.example", secure.port_of("SASL_PLAINTEXT"))
    ]
    assert resp.cluster_authorized_operations == 1 << AclOperation.DESCRIBE
    # no CLUSTER DESCRIBE: 0, as Kafka; the request itself needs no ACL
    resp = await describe_cluster(reader, 1, include_cluster_authorized_operations=True)
    assert resp.error_code == Error.NONE
    assert resp.cluster_authorized_operations == 0
    plain = await KafkaTestClient.connect("127.0.0.1", secure.port_of("PLAINTEXT"))
    resp = await describe_cluster(plain, 0)
    assert [(b.host, b.port) for b in resp.brokers] == [
        ("plain.example", secure.port_of("PLAINTEXT"))
    ]


# --- failover ----------------------------------------------------------------------------------


async def test_offset_delete_survives_a_failover(tmp_path: Path) -> None:
    """Two nodes on one database: the group's coordinator deletes an offset and stops; the node
    that takes its partition over replays the tombstone."""
    import asyncio
    from contextlib import AsyncExitStack

    from app.config import Settings
    from app.kafka.limits import ServerLimits
    from app.kafka.server import start_kafka_server
    from app.runtime.node import CoordinatorNode
    from storage.log import EventLog
    from storage.migrate import upgrade_async
    from storage.writer import LogWriter
    from tests.runtime.node_fixture import sqlite_url

    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    ports = {1: free_port(), 2: free_port()}
    async with AsyncExitStack() as stack:
        nodes: dict[int, CoordinatorNode] = {}
        for node_id, port in ports.items():
            settings = Settings(
                database_url=url,
                node_id=node_id,
                kafka_listen=f"127.0.0.1:{port}",
                log_partitions=4,
                lease_ttl_ms=1000,
                topics="t1:3",
            )
            event_log = await EventLog.open(url)
            stack.push_async_callback(event_log.close)
            writer = LogWriter(event_log, node_id)
            writer.start()
            stack.push_async_callback(writer.stop)
            n = nodes[node_id] = CoordinatorNode(settings, event_log, writer)
            await n.start()
            stack.push_async_callback(n.stop)
            server = await start_kafka_server(
                n, "127.0.0.1", port, ServerLimits.from_settings(settings)
            )
            stack.callback(server.close)

        async def coordinator_of(group: str, via: int) -> int:
            c = await KafkaTestClient.connect("127.0.0.1", ports[via])
            try:
                for _ in range(200):
                    resp = await c.find_coordinator(group)
                    if resp.error_code == Error.NONE:
                        return int(resp.node_id)
                    await asyncio.sleep(0.05)
            finally:
                await c.close()
            raise AssertionError("no coordinator")

        await asyncio.gather(*(n.wait_loaded() for n in nodes.values()))
        owner = await coordinator_of("od-failover", 1)
        c = await KafkaTestClient.connect("127.0.0.1", ports[owner])
        await commit(c, "od-failover", {("t1", 0): 5, ("t1", 1): 6})
        assert errors(await offset_delete(c, "od-failover", [("t1", 0)])) == {("t1", 0): 0}
        await c.close()
        await nodes[owner].stop()  # hands its leases over
        survivor = 2 if owner == 1 else 1
        deadline = asyncio.get_running_loop().time() + 10
        while await coordinator_of("od-failover", survivor) != survivor:
            assert asyncio.get_running_loop().time() < deadline, "no takeover"
            await asyncio.sleep(0.1)
        c = await KafkaTestClient.connect("127.0.0.1", ports[survivor])
        while (await c.offset_fetch("od-failover", [("t1", 0)])).groups[0].error_code:
            assert asyncio.get_running_loop().time() < deadline, "never loaded"
            await asyncio.sleep(0.1)  # the partition is still loading on the survivor
        assert await committed(c, "od-failover", [("t1", 0), ("t1", 1)]) == [-1, 6]
        await c.close()


async def test_sync_group_v5_without_its_protocol_is_refused_before_the_acl_check(
    secure: SecureNode,
) -> None:
    """protocol.md §6.1 (KafkaApis.handleSyncGroupRequest): a v5 SyncGroup missing its
    protocol type or name is answered INCONSISTENT_GROUP_PROTOCOL before authorization, so a
    principal without READ on the group hears that, not GROUP_AUTHORIZATION_FAILED."""
    ops = await sasl_client(secure, "ops")  # no ACL on any group
    try:
        for protocol_type, protocol_name in ((None, "range"), ("consumer", None)):
            resp = await ops.request(
                ops.sync_group_request(
                    "od-acl", 1, "m", protocol_type=protocol_type, protocol_name=protocol_name
                )
            )
            assert resp.error_code == Error.INCONSISTENT_GROUP_PROTOCOL
        resp = await ops.request(ops.sync_group_request("od-acl", 1, "m"))
        assert resp.error_code == Error.GROUP_AUTHORIZATION_FAILED
    finally:
        await ops.close()
