"""Driving real groups on the node the way a consumer does (consumer-protocol bytes included)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.group.messages import Error
from tests.support.consumer_bytes import assignment, subscription
from tests.support.kafka_client import KafkaTestClient

# the consumer protocol's v0 bytes
SUBSCRIPTION = subscription(["t1"])
ASSIGNMENT = assignment({"t1": [0, 1, 2]})
# "range" first: a single member's vote selects it
PROTOCOLS = (("range", SUBSCRIPTION), ("roundrobin", subscription(["t1", "t6"])))


async def join(
    client: KafkaTestClient,
    group: str,
    *,
    version: int = 9,
    group_instance_id: str | None = None,
    **kwargs: Any,
) -> Any:
    """JoinGroup as a consumer does it: a dynamic member at v4+ is first told
    MEMBER_ID_REQUIRED and joins again with the id it was given (KIP-394)."""
    kwargs.setdefault("protocols", PROTOCOLS)
    resp = await client.join_group(
        group, version=version, group_instance_id=group_instance_id, **kwargs
    )
    if resp.error_code == Error.MEMBER_ID_REQUIRED:
        resp = await client.join_group(
            group, resp.member_id, version=version, group_instance_id=group_instance_id, **kwargs
        )
    return resp


async def stable_group(
    client: KafkaTestClient,
    group: str,
    *,
    join_version: int = 9,
    sync_version: int = 5,
    group_instance_id: str | None = None,
) -> tuple[str, int]:
    """A one-member group taken to Stable; returns (member id, generation)."""
    joined = await join(client, group, version=join_version, group_instance_id=group_instance_id)
    assert joined.error_code == Error.NONE, joined
    assert joined.leader == joined.member_id
    synced = await client.sync_group(
        group,
        joined.generation_id,
        joined.member_id,
        assignments={joined.member_id: ASSIGNMENT},
        group_instance_id=group_instance_id,
        version=sync_version,
    )
    assert synced.error_code == Error.NONE, synced
    assert synced.assignment == ASSIGNMENT
    return joined.member_id, joined.generation_id


async def describe(client: KafkaTestClient, group: str, version: int = 5) -> Any:
    resp = await client.request(
        client.build_request(15, version, groups=[group], include_authorized_operations=True)
    )
    (described,) = resp.groups
    return described


async def list_groups(
    client: KafkaTestClient,
    version: int = 5,
    states: list[str] | None = None,
    types: list[str] | None = None,
) -> Any:
    return await client.request(
        client.build_request(16, version, states_filter=states or [], types_filter=types or [])
    )


async def delete_groups(client: KafkaTestClient, groups: list[str], version: int = 2) -> Any:
    resp = await client.request(client.build_request(42, version, groups_names=groups))
    return [(r.group_id, r.error_code) for r in resp.results]


def commit_errors(resp: Any) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


def fetched_topics(resp: Any, version: int, group_index: int = 0) -> Any:
    """The topics of an OffsetFetch reply (v8+: of one group)."""
    if version >= 8:
        return resp.groups[group_index].topics
    return resp.topics


def fetched(resp: Any, version: int, group_index: int = 0) -> list[tuple[str, int, int, int]]:
    """(topic, partition, committed offset, error) rows of an OffsetFetch reply."""
    return [
        (t.name, p.partition_index, p.committed_offset, p.error_code)
        for t in fetched_topics(resp, version, group_index)
        for p in t.partitions
    ]


async def committed(
    client: KafkaTestClient, group: str, partitions: list[tuple[str, int]]
) -> list[int]:
    resp = await client.offset_fetch(group, partitions, version=8)
    return [row[2] for row in fetched(resp, 8)]


async def wait_for_state(
    client: KafkaTestClient, group: str, state: str, timeout: float = 10.0
) -> None:
    """Poll DescribeGroups until `group` is in `state` (e.g. a rebalance has begun)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (current := (await describe(client, group)).group_state) != state:
        assert asyncio.get_running_loop().time() < deadline, f"{group} stuck in {current}"
        await asyncio.sleep(0.02)
