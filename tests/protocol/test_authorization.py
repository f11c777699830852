"""Who may do what on the Kafka port: each API's ACL check where Kafka's KafkaApis puts it,
and the addresses each listener advertises.

The node is in-process with the ACL authorizer; clients authenticate over SASL_PLAINTEXT as
`team` (ACLs on groups `team-*` and topic t1), `other` (no ACLs at all) or `ops` (CLUSTER
DESCRIBE and GROUP DESCRIBE on everything), and the super user `admin`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.protocol.secure_node import SecureNode, sasl_node
from tests.support.kafka_client import KafkaTestClient

PASSWORD = "pw-for-tests"
SCRAM = "SCRAM-SHA-256"
GROUP_AUTH, TOPIC_AUTH = 30, 29
INT32_MIN = -(2**31)


def acl(
    principal: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[SecureNode]:
    async with sasl_node(
        tmp_path,
        ("admin", "team", "other", "ops"),
        [
            acl(
                "User:team",
                AclOperation.READ,
                ResourceType.GROUP,
                "team-",
                PatternType.PREFIXED,
            ),
            acl(
                "User:team",
                AclOperation.DELETE,
                ResourceType.GROUP,
                "team-",
                PatternType.PREFIXED,
            ),
            acl("User:team", AclOperation.READ, ResourceType.TOPIC, "t1"),
            # DENY wins over the prefixed ALLOW
            acl(
                "User:team",
                AclOperation.ALL,
                ResourceType.GROUP,
                "team-secret",
                permission=AclPermissionType.DENY,
            ),
            acl("User:ops", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
            acl("User:ops", AclOperation.DESCRIBE, ResourceType.GROUP, "*"),
        ],
        password=PASSWORD,
    ) as n:
        yield n


async def client(node: SecureNode, user: str) -> KafkaTestClient:
    return await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=(SCRAM, user, PASSWORD)
    )


async def joined(c: KafkaTestClient, group: str) -> tuple[str, int]:
    first = await c.join_group(group, version=9)
    assert first.error_code == 79  # MEMBER_ID_REQUIRED
    resp = await c.join_group(group, first.member_id, version=9)
    assert resp.error_code == 0
    sync = await c.sync_group(group, resp.generation_id, resp.member_id, assignments={})
    assert sync.error_code == 0
    return resp.member_id, resp.generation_id


async def test_group_membership_needs_group_read(node: SecureNode) -> None:
    team, other = await client(node, "team"), await client(node, "other")
    member, generation = await joined(team, "team-a")
    assert (await team.heartbeat("team-a", generation, member)).error_code == 0
    # a stranger cannot keep the member alive, sync, leave it, or join
    assert (await other.heartbeat("team-a", generation, member)).error_code == GROUP_AUTH
    assert (await other.join_group("team-a", version=9)).error_code == GROUP_AUTH
    assert (await other.sync_group("team-a", generation, member, assignments={})).error_code == (
        GROUP_AUTH
    )
    left = await other.leave_group("team-a", member)
    assert left.error_code == GROUP_AUTH
    assert (await team.heartbeat("team-a", generation, member)).error_code == 0
    # DENY wins over the prefixed ALLOW
    assert (await team.join_group("team-secret", version=9)).error_code == GROUP_AUTH


async def test_offset_commit_needs_group_read_and_topic_read(node: SecureNode) -> None:
    team, other = await client(node, "team"), await client(node, "other")
    resp = await team.offset_commit("team-b", {("t1", 0): 5, ("t2", 0): 6})
    errors = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    assert errors == {("t1", 0): 0, ("t2", 0): TOPIC_AUTH}
    resp = await other.offset_commit("team-b", {("t1", 0): 9})
    assert [p.error_code for t in resp.topics for p in t.partitions] == [GROUP_AUTH]
    # nothing of the refused commits was stored
    fetched = await team.offset_fetch("team-b", [("t1", 0)])
    assert [p.committed_offset for t in fetched.groups[0].topics for p in t.partitions] == [5]


async def test_offset_fetch_needs_group_describe_and_filters_topics(node: SecureNode) -> None:
    admin, team, other = [await client(node, u) for u in ("admin", "team", "other")]
    await admin.offset_commit("team-c", {("t1", 0): 1, ("t2", 1): 2})
    # everything committed: t2 (not describable by team) is left out
    everything = await team.offset_fetch("team-c", None)
    assert {t.name for t in everything.groups[0].topics} == {"t1"}
    # named partitions: t2 answers TOPIC_AUTHORIZATION_FAILED
    named = await team.offset_fetch("team-c", [("t1", 0), ("t2", 1)])
    got = {
        (t.name, p.partition_index): p.error_code
        for t in named.groups[0].topics
        for p in t.partitions
    }
    assert got == {("t1", 0): 0, ("t2", 1): TOPIC_AUTH}
    refused = await other.offset_fetch("team-c", None)
    assert refused.groups[0].error_code == GROUP_AUTH


async def test_describe_list_delete_and_find_coordinator(node: SecureNode) -> None:
    team, other, ops = [await client(node, u) for u in ("team", "other", "ops")]
    await joined(team, "team-d")
    admin = await client(node, "admin")
    await joined(admin, "admins-only")

    assert (await team.find_coordinator("team-d")).error_code == 0
    assert (await other.find_coordinator("team-d")).error_code == GROUP_AUTH

    described = await other.request(
        other.build_request(15, 5, groups=["team-d"], include_authorized_operations=True)
    )
    assert described.groups[0].error_code == GROUP_AUTH
    described = await team.request(
        team.build_request(15, 5, groups=["team-d"], include_authorized_operations=True)
    )
    group = described.groups[0]
    assert group.error_code == 0 and group.members
    # READ (implies DESCRIBE) and DELETE on the group
    ops_bits = {op for op in AclOperation if group.authorized_operations & (1 << op)}
    assert ops_bits == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}

    def names(resp: object) -> set[str]:
        return {g.group_id for g in resp.groups}  # type: ignore[attr-defined]

    # ListGroups: filtered by GROUP DESCRIBE; all of them with CLUSTER DESCRIBE
    assert names(await team.request(team.build_request(16, 4, states_filter=[]))) == {"team-d"}
    assert names(await other.request(other.build_request(16, 4, states_filter=[]))) == set()
    assert names(await ops.request(ops.build_request(16, 4, states_filter=[]))) == {
        "team-d",
        "admins-only",
    }

    deleted = await other.request(other.build_request(42, 2, groups_names=["team-d"]))
    assert [r.error_code for r in deleted.results] == [GROUP_AUTH]


async def test_metadata_lists_describable_topics_on_the_listener_asked(node: SecureNode) -> None:
    team = await client(node, "team")
    meta = await team.request(
        team.build_request(
            3,
            10,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        )
    )
    assert [t.name for t in meta.topics] == ["t1"]  # t2 is not DESCRIBE-able by team
    assert meta.topics[0].topic_authorized_operations & (1 << AclOperation.READ)
    assert meta.cluster_authorized_operations == 0
    # the addresses advertised on the listener the request came in on
    assert [(b.host, b.port) for b in meta.brokers] == [
        ("sasl.example", node.port_of("SASL_PLAINTEXT"))
    ]
    named = await team.metadata(["t2"])
    assert named.topics[0].error_code == TOPIC_AUTH

    plain = await KafkaTestClient.connect("127.0.0.1", node.port_of("PLAINTEXT"))
    meta = await plain.metadata(None)
    assert [(b.host, b.port) for b in meta.brokers] == [
        ("plain.example", node.port_of("PLAINTEXT"))
    ]
    assert meta.topics == ()  # User:ANONYMOUS may describe nothing
    coordinator = await team.find_coordinator("team-z")
    assert (coordinator.host, coordinator.port) == ("sasl.example", node.port_of("SASL_PLAINTEXT"))
