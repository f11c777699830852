"""Every advertised API against the real node, at its lowest and highest advertised version (and
the versions real clients use), asserting coordinator behaviour (protocol.md §3-§9, §11)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass

import pytest
from kio.index import load_response_schema

from app.group.messages import Error
from app.kafka.apis import APIS
from tests.api.helpers import eventually
from tests.protocol.data_plane import fetch_request, list_offsets_request, produce_request
from tests.protocol.groups import (
    ASSIGNMENT,
    PROTOCOLS,
    SUBSCRIPTION,
    commit_errors,
    committed,
    delete_groups,
    describe,
    fetched,
    join,
    list_groups,
    stable_group,
    wait_for_state,
)
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

INT32_MIN = -(2**31)


@dataclass(frozen=True)
class Versions:
    """One version per API used by a group's whole life."""

    name: str
    find: int
    join: int
    sync: int
    heartbeat: int
    commit: int
    fetch: int
    describe: int
    list: int
    leave: int
    delete: int

    @classmethod
    def edge(cls, name: str, pick: str) -> Versions:
        """The lowest ("min_version") or highest ("max_version") version the node advertises."""
        v = {a.name: getattr(a, pick) for a in APIS}
        return cls(
            name,
            find=v["FindCoordinator"],
            join=v["JoinGroup"],
            sync=v["SyncGroup"],
            heartbeat=v["Heartbeat"],
            commit=v["OffsetCommit"],
            fetch=v["OffsetFetch"],
            describe=v["DescribeGroups"],
            list=v["ListGroups"],
            leave=v["LeaveGroup"],
            delete=v["DeleteGroups"],
        )


LOWEST = Versions.edge("lowest", "min_version")
HIGHEST = Versions.edge("highest", "max_version")
VERSION_SETS = [
    LOWEST,
    HIGHEST,
    # what real clients send (clients.md §1.1, capped by what we advertise)
    Versions("kafka-python", 6, 7, 5, 4, 8, 8, 5, 5, 5, 2),
    Versions("aiokafka", 1, 5, 3, 1, 3, 3, 3, 1, 1, 1),
    Versions("librdkafka", 2, 5, 3, 3, 9, 9, 5, 5, 1, 1),
]


def test_lowest_and_highest_are_the_advertised_edges() -> None:
    assert (LOWEST.join, LOWEST.commit, LOWEST.fetch) == (0, 2, 1)
    assert (HIGHEST.join, HIGHEST.sync, HIGHEST.commit, HIGHEST.describe) == (9, 5, 9, 6)


# --- a group's whole life --------------------------------------------------------------------


@pytest.mark.parametrize("v", VERSION_SETS, ids=lambda v: v.name)
async def test_group_life_cycle(node: RunningNode, client: KafkaTestClient, v: Versions) -> None:
    group = f"life-{v.name}"

    # FindCoordinator: this node
    fc = await client.find_coordinator(group, version=v.find)
    entry = fc.coordinators[0] if v.find >= 4 else fc
    assert (entry.error_code, entry.node_id, entry.host, entry.port) == (
        Error.NONE,
        1,
        "127.0.0.1",
        node.port,
    )

    # JoinGroup: v4+ dynamic members first get an id (KIP-394, protocol.md §4.4)
    first = await client.join_group(group, protocols=PROTOCOLS, version=v.join)
    if v.join >= 4:
        assert first.error_code == Error.MEMBER_ID_REQUIRED
        assert first.generation_id == -1
        joined = await client.join_group(
            group, first.member_id, protocols=PROTOCOLS, version=v.join
        )
        assert joined.member_id == first.member_id
    else:
        joined = first
    member, gen = joined.member_id, joined.generation_id
    assert joined.error_code == Error.NONE
    assert member.startswith("proto-test-")  # protocol.md §2.2: <clientId>-<uuid>
    assert (gen, joined.leader, joined.protocol_name) == (1, member, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, SUBSCRIPTION)]
    if v.join >= 7:
        assert joined.protocol_type == "consumer"
    if v.join >= 9:
        assert joined.skip_assignment is False

    # CompletingRebalance: no protocol/metadata described, heartbeat fine, commits refused
    d = await describe(client, group, v.describe)
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        Error.NONE,
        "CompletingRebalance",
        "consumer",
        "",
    )
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in d.members] == [
        (member, b"", b"")
    ]
    hb = await client.heartbeat(group, gen, member, version=v.heartbeat)
    assert hb.error_code == Error.NONE  # protocol.md §7.1
    early = await client.offset_commit(
        group, {("t1", 0): 1}, generation_id=gen, member_id=member, version=v.commit
    )
    assert commit_errors(early) == [("t1", 0, Error.REBALANCE_IN_PROGRESS)]  # protocol.md §8.1

    # SyncGroup: the leader's assignment comes back
    synced = await client.sync_group(
        group, gen, member, assignments={member: ASSIGNMENT}, version=v.sync
    )
    assert (synced.error_code, synced.assignment) == (Error.NONE, ASSIGNMENT)
    if v.sync >= 5:
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")

    # Heartbeat
    assert (await client.heartbeat(group, gen, member, version=v.heartbeat)).error_code == 0
    stale = await client.heartbeat(group, gen + 1, member, version=v.heartbeat)
    assert stale.error_code == Error.ILLEGAL_GENERATION
    stranger = await client.heartbeat(group, gen, "nobody", version=v.heartbeat)
    assert stranger.error_code == Error.UNKNOWN_MEMBER_ID

    # OffsetCommit: per partition, unknown topic refused
    commit = await client.offset_commit(
        group,
        {("t1", 0): 7, ("t6", 5): 11, ("nope", 0): 1},
        generation_id=gen,
        member_id=member,
        metadata="md",
        leader_epoch=4,
        version=v.commit,
    )
    assert commit_errors(commit) == [
        ("t1", 0, Error.NONE),
        ("t6", 5, Error.NONE),
        ("nope", 0, Error.UNKNOWN_TOPIC_OR_PARTITION),
    ]

    # OffsetFetch
    resp = await client.offset_fetch(
        group, [("t1", 0), ("t1", 1), ("t6", 5), ("nope", 0)], version=v.fetch
    )
    assert fetched(resp, v.fetch) == [
        ("t1", 0, 7, Error.NONE),
        ("t1", 1, -1, Error.NONE),
        ("t6", 5, 11, Error.NONE),
        ("nope", 0, -1, Error.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    topics = resp.groups[0].topics if v.fetch >= 8 else resp.topics
    assert [p.metadata for t in topics for p in t.partitions] == ["md", "", "md", ""]
    if v.fetch >= 5:
        epoch = 4 if v.commit >= 6 else -1  # CommittedLeaderEpoch exists from commit v6
        assert [p.committed_leader_epoch for t in topics for p in t.partitions] == [
            epoch,
            -1,
            epoch,
            -1,
        ]
    if v.fetch >= 2:  # null topics = everything committed
        every = await client.offset_fetch(group, None, version=v.fetch)
        assert fetched(every, v.fetch) == [("t1", 0, 7, 0), ("t6", 5, 11, 0)]

    # DescribeGroups: Stable shows protocol, metadata and assignment (protocol.md §9.1)
    d = await describe(client, group, v.describe)
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        Error.NONE,
        "Stable",
        "consumer",
        "range",
    )
    (m,) = d.members
    assert (m.member_id, m.client_id, m.client_host) == (member, "proto-test", "/127.0.0.1")
    assert (m.member_metadata, m.member_assignment) == (SUBSCRIPTION, ASSIGNMENT)
    if v.describe >= 4:
        assert m.group_instance_id is None
    if v.describe >= 3:
        # asked for, without an authorizer: every operation a group supports, as Kafka's
        # AuthHelper.authorizedOperations answers (READ, DESCRIBE, DELETE)
        assert d.authorized_operations == (1 << 3) | (1 << 8) | (1 << 6)

    # ListGroups
    listed = {g.group_id: g for g in (await list_groups(client, v.list)).groups}
    assert listed[group].protocol_type == "consumer"
    if v.list >= 4:
        assert listed[group].group_state == "Stable"
    if v.list >= 5:
        assert listed[group].group_type == "classic"

    # DeleteGroups refuses a group with members
    assert await delete_groups(client, [group], v.delete) == [(group, Error.NON_EMPTY_GROUP)]

    # LeaveGroup: the last member leaves, the group is Empty
    if v.leave >= 3:
        left = await client.leave_group(group, members=[(member, None)], version=v.leave)
        assert [(x.member_id, x.group_instance_id, x.error_code) for x in left.members] == [
            (member, None, Error.NONE)
        ]
    else:
        left = await client.leave_group(group, member, version=v.leave)
    assert left.error_code == Error.NONE
    gone = await client.heartbeat(group, gen, member, version=v.heartbeat)
    assert gone.error_code == Error.UNKNOWN_MEMBER_ID
    d = await describe(client, group, v.describe)
    assert (d.group_state, d.protocol_type, d.protocol_data, list(d.members)) == (
        "Empty",
        "consumer",
        "",
        [],
    )

    # DeleteGroups: gone with its offsets
    assert await delete_groups(client, [group], v.delete) == [(group, Error.NONE)]
    assert (await describe(client, group, v.describe)).group_state == "Dead"
    resp = await client.offset_fetch(group, [("t1", 0), ("t6", 5)], version=v.fetch)
    assert fetched(resp, v.fetch) == [("t1", 0, -1, 0), ("t6", 5, -1, 0)]
    assert group not in {g.group_id for g in (await list_groups(client, v.list)).groups}


# --- two members ----------------------------------------------------------------------------


@pytest.mark.node_settings(initial_rebalance_delay_ms=300)
@pytest.mark.parametrize("v", [LOWEST, HIGHEST], ids=lambda v: v.name)
async def test_two_members_rebalance(node: RunningNode, v: Versions) -> None:
    a, b = await node.client("a"), await node.client("b")
    try:
        # both join within the initial delay window: one generation for both (protocol.md §5.2)
        joined_a, joined_b = await asyncio.gather(
            join(a, "duo", version=v.join), join(b, "duo", version=v.join)
        )
        assert {joined_a.error_code, joined_b.error_code} == {Error.NONE}
        assert joined_a.generation_id == joined_b.generation_id == 1
        leader, follower = (
            (joined_a, joined_b) if joined_a.leader == joined_a.member_id else (joined_b, joined_a)
        )
        assert follower.leader == leader.member_id
        assert {m.member_id for m in leader.members} == {leader.member_id, follower.member_id}
        # protocol.md §5.4: the member list goes to the leader only
        assert list(follower.members) == []
        lc, fc = (a, b) if leader is joined_a else (b, a)

        # the follower's SyncGroup waits for the leader's assignment to be written
        # (protocol.md §6.2)
        follower_sync = asyncio.ensure_future(
            fc.sync_group("duo", 1, follower.member_id, version=v.sync)
        )
        await asyncio.sleep(0.1)
        assert not follower_sync.done()
        leader_sync = await lc.sync_group(
            "duo",
            1,
            leader.member_id,
            assignments={leader.member_id: b"for-leader", follower.member_id: b"for-follower"},
            version=v.sync,
        )
        assert (leader_sync.error_code, leader_sync.assignment) == (Error.NONE, b"for-leader")
        synced = await asyncio.wait_for(follower_sync, 5)
        assert (synced.error_code, synced.assignment) == (Error.NONE, b"for-follower")
        d = await describe(lc, "duo", v.describe)
        assert (d.group_state, len(d.members)) == ("Stable", 2)

        # the follower leaves: the leader is told to rejoin and is alone in generation 2
        left = await fc.leave_group("duo", follower.member_id, version=v.leave)
        assert left.error_code == Error.NONE
        hb = await lc.heartbeat("duo", 1, leader.member_id, version=v.heartbeat)
        assert hb.error_code == Error.REBALANCE_IN_PROGRESS
        rejoined = await lc.join_group("duo", leader.member_id, protocols=PROTOCOLS, version=v.join)
        assert (rejoined.error_code, rejoined.generation_id) == (Error.NONE, 2)
        assert [m.member_id for m in rejoined.members] == [leader.member_id]
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("v", [LOWEST, HIGHEST], ids=lambda v: v.name)
async def test_empty_group_id(client: KafkaTestClient, v: Versions) -> None:
    # protocol.md §4.1, §6.1, §7.1, §7.3: INVALID_GROUP_ID; protocol.md §8.1: "" may commit offsets
    assert (await client.join_group("", version=v.join)).error_code == Error.INVALID_GROUP_ID
    sync = await client.sync_group("", 1, "m", version=v.sync)
    assert sync.error_code == Error.INVALID_GROUP_ID
    hb = await client.heartbeat("", 1, "m", version=v.heartbeat)
    assert hb.error_code == Error.INVALID_GROUP_ID
    left = await client.leave_group("", "m", members=[("m", None)], version=v.leave)
    assert left.error_code == Error.INVALID_GROUP_ID
    commit = await client.offset_commit("", {("t1", 0): 3}, version=v.commit)
    assert commit_errors(commit) == [("t1", 0, Error.NONE)]
    assert fetched(await client.offset_fetch("", [("t1", 0)], version=v.fetch), v.fetch) == [
        ("t1", 0, 3, Error.NONE)
    ]


# --- JoinGroup -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(10))
async def test_member_id_required_from_v4_only(client: KafkaTestClient, version: int) -> None:
    resp = await client.join_group("mir", protocols=PROTOCOLS, version=version)
    if version < 4:
        assert resp.error_code == Error.NONE
        assert (resp.generation_id, resp.leader) == (1, resp.member_id)
        return
    # protocol.md §4.4: an id is handed out and nothing else changes
    assert resp.error_code == Error.MEMBER_ID_REQUIRED
    assert resp.member_id.startswith("proto-test-")
    assert (resp.generation_id, resp.leader, list(resp.members)) == (-1, "", [])
    assert resp.protocol_name == ("" if version < 7 else None)
    d = await describe(client, "mir")
    assert (d.group_state, list(d.members)) == ("Empty", [])
    joined = await client.join_group("mir", resp.member_id, protocols=PROTOCOLS, version=version)
    assert (joined.error_code, joined.member_id, joined.generation_id) == (
        Error.NONE,
        resp.member_id,
        1,
    )


@pytest.mark.parametrize("version", [5, 9])
async def test_static_member_joins_without_member_id_required(
    client: KafkaTestClient, version: int
) -> None:
    resp = await client.join_group(
        "static", protocols=PROTOCOLS, group_instance_id="inst-1", version=version
    )
    assert resp.error_code == Error.NONE  # protocol.md §4.5: never MEMBER_ID_REQUIRED
    assert resp.member_id.startswith("inst-1-")  # protocol.md §2.2: <groupInstanceId>-<uuid>
    assert [(m.member_id, m.group_instance_id) for m in resp.members] == [
        (resp.member_id, "inst-1")
    ]


@pytest.mark.parametrize("version", [0, 9])
async def test_join_group_session_timeout_out_of_range(
    client: KafkaTestClient, version: int
) -> None:
    resp = await client.join_group("sto", session_timeout_ms=1000, version=version)
    assert resp.error_code == Error.INVALID_SESSION_TIMEOUT  # protocol.md §4.1: min 6000
    assert (await describe(client, "sto")).group_state == "Dead"  # no group created


@pytest.mark.parametrize("version", [0, 9])
async def test_join_group_inconsistent_protocol(client: KafkaTestClient, version: int) -> None:
    await stable_group(client, "proto")
    other = await join(client, "proto", version=version, protocols=[("sticky", b"")])
    assert other.error_code == Error.INCONSISTENT_GROUP_PROTOCOL  # protocol.md §4.3


# --- SyncGroup -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 5])
async def test_sync_group_errors(client: KafkaTestClient, version: int) -> None:
    member, gen = await stable_group(client, "sy")
    unknown = await client.sync_group("sy", gen, "nobody", version=version)
    assert unknown.error_code == Error.UNKNOWN_MEMBER_ID
    stale = await client.sync_group("sy", gen + 1, member, version=version)
    assert stale.error_code == Error.ILLEGAL_GENERATION
    no_group = await client.sync_group("no-such-group", 1, member, version=version)
    assert no_group.error_code == Error.UNKNOWN_MEMBER_ID
    # Stable: answered at once with the stored assignment (protocol.md §6.3)
    again = await client.sync_group("sy", gen, member, version=version)
    assert (again.error_code, again.assignment) == (Error.NONE, ASSIGNMENT)


async def test_sync_group_v5_with_another_protocol_name(client: KafkaTestClient) -> None:
    member, gen = await stable_group(client, "sy5")
    resp = await client.sync_group("sy5", gen, member, protocol_name="roundrobin", version=5)
    assert resp.error_code == Error.INCONSISTENT_GROUP_PROTOCOL  # protocol.md §6.1


# --- Heartbeat, LeaveGroup -------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 4])
async def test_heartbeat_sees_a_rebalance(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    member, gen = await stable_group(client, "hb")
    newcomer = await node.client("newcomer")
    try:
        parked = asyncio.ensure_future(join(newcomer, "hb", version=3))
        await wait_for_state(client, "hb", "PreparingRebalance")
        hb = await client.heartbeat("hb", gen, member, version=version)
        assert hb.error_code == Error.REBALANCE_IN_PROGRESS  # protocol.md §7.1
        rejoin = await client.join_group("hb", member, protocols=PROTOCOLS, version=9)
        assert rejoin.generation_id == gen + 1
        assert (await parked).generation_id == gen + 1
        old = await client.heartbeat("hb", gen, member, version=version)
        assert old.error_code == Error.ILLEGAL_GENERATION
    finally:
        await newcomer.close()


@pytest.mark.parametrize("version", [0, 2])
async def test_leave_group_v0_2_unknown_member(client: KafkaTestClient, version: int) -> None:
    await stable_group(client, "lv")
    resp = await client.leave_group("lv", "nobody", version=version)
    assert resp.error_code == Error.UNKNOWN_MEMBER_ID  # protocol.md §7.3: first member error on top


@pytest.mark.parametrize("version", [3, 5])
async def test_leave_group_batch_by_instance_id(client: KafkaTestClient, version: int) -> None:
    await stable_group(client, "lvs", join_version=5, group_instance_id="inst-1")
    resp = await client.leave_group(
        "lvs",
        members=[("", "inst-1"), ("nobody", None), ("", "inst-unknown")],
        reason="admin",
        version=version,
    )
    assert resp.error_code == Error.NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == [
        ("", "inst-1", Error.NONE),
        ("nobody", None, Error.UNKNOWN_MEMBER_ID),
        ("", "inst-unknown", Error.UNKNOWN_MEMBER_ID),
    ]
    d = await describe(client, "lvs")  # removed by instance id alone
    assert (d.group_state, list(d.members)) == ("Empty", [])


async def test_leave_group_unknown_group(client: KafkaTestClient) -> None:
    resp = await client.leave_group("ghost", members=[("m", None)], version=5)
    assert resp.error_code == Error.NONE
    assert [m.error_code for m in resp.members] == [Error.UNKNOWN_MEMBER_ID]


@pytest.mark.parametrize(
    ("version", "error", "message"),
    [(5, Error.NONE, None), (6, Error.GROUP_ID_NOT_FOUND, "Group ghost not found.")],
)
async def test_describe_unknown_group_by_version(
    client: KafkaTestClient, version: int, error: Error, message: str | None
) -> None:
    """protocol.md §9.1: Dead with no error before v6, GROUP_ID_NOT_FOUND from v6 (KIP-1043)."""
    resp = await client.request(client.build_request(15, version, groups=["ghost"]))
    (group,) = resp.groups
    assert (group.error_code, group.group_state) == (error, "Dead")
    assert getattr(group, "error_message", None) == message


# --- OffsetCommit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (2, Error.ILLEGAL_GENERATION),
        (8, Error.ILLEGAL_GENERATION),
        (9, Error.GROUP_ID_NOT_FOUND),  # protocol.md §8.1: Java, v9+
    ],
)
async def test_offset_commit_unknown_group_with_generation(
    client: KafkaTestClient, version: int, expected: Error
) -> None:
    resp = await client.offset_commit(
        "ghost", {("t1", 0): 5}, generation_id=3, member_id="m", version=version
    )
    assert commit_errors(resp) == [("t1", 0, expected)]
    assert (await describe(client, "ghost")).group_state == "Dead"
    assert await committed(client, "ghost", [("t1", 0)]) == [-1]


@pytest.mark.parametrize("version", [2, 9])
async def test_offset_commit_without_generation_makes_a_simple_group(
    client: KafkaTestClient, version: int
) -> None:
    resp = await client.offset_commit("simple", {("t1", 2): 42}, version=version)
    assert commit_errors(resp) == [("t1", 2, Error.NONE)]
    d = await describe(client, "simple")
    assert (d.group_state, d.protocol_type, list(d.members)) == ("Empty", "", [])
    assert await committed(client, "simple", [("t1", 2)]) == [42]


@pytest.mark.node_settings(offsets_retention_check_interval_ms=1000)
async def test_offset_commit_v2_4_retention_time_expires_the_offset(
    client: KafkaTestClient,
) -> None:
    # protocol.md §8.2/§8.4: RetentionTimeMs (v2-v4 only) sets an explicit expire timestamp
    for version in (2, 4, 5):
        resp = await client.offset_commit(
            f"ret-v{version}", {("t1", 0): 8}, retention_time_ms=1, version=version
        )
        assert commit_errors(resp) == [("t1", 0, Error.NONE)]
    deadline = time.monotonic() + 5
    while await committed(client, "ret-v4", [("t1", 0)]) != [-1]:
        assert time.monotonic() < deadline, "the v4 offset never expired"
        await asyncio.sleep(0.1)
    assert await committed(client, "ret-v2", [("t1", 0)]) == [-1]
    # v5 has no RetentionTimeMs: the broker default (7 days) applies
    assert await committed(client, "ret-v5", [("t1", 0)]) == [8]


@pytest.mark.parametrize("version", [2, 9])
async def test_offset_commit_member_checks(client: KafkaTestClient, version: int) -> None:
    member, gen = await stable_group(client, "oc")
    bad_gen = await client.offset_commit(
        "oc", {("t1", 0): 1}, generation_id=gen + 1, member_id=member, version=version
    )
    assert commit_errors(bad_gen) == [("t1", 0, Error.ILLEGAL_GENERATION)]
    stranger = await client.offset_commit(
        "oc", {("t1", 0): 1}, generation_id=gen, member_id="nobody", version=version
    )
    assert commit_errors(stranger) == [("t1", 0, Error.UNKNOWN_MEMBER_ID)]
    anonymous = await client.offset_commit("oc", {("t1", 0): 1}, version=version)
    assert commit_errors(anonymous) == [("t1", 0, Error.UNKNOWN_MEMBER_ID)]  # not Empty
    too_big = await client.offset_commit(
        "oc",
        {("t1", 0): 1, ("t1", 1): 2},
        generation_id=gen,
        member_id=member,
        metadata="x" * 4097,
        version=version,
    )
    assert commit_errors(too_big) == [
        ("t1", 0, Error.OFFSET_METADATA_TOO_LARGE),
        ("t1", 1, Error.OFFSET_METADATA_TOO_LARGE),
    ]
    assert await committed(client, "oc", [("t1", 0)]) == [-1]


# --- OffsetFetch -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [8, 9])
async def test_offset_fetch_several_groups(client: KafkaTestClient, version: int) -> None:
    await client.offset_commit("of-a", {("t1", 0): 5, ("t6", 1): 6})
    await client.offset_commit("of-b", {("t1", 2): 9})
    resp = await client.offset_fetch(
        "",
        groups={"of-a": [("t1", 0), ("t1", 1)], "of-b": None, "of-none": [("t6", 0)]},
        version=version,
    )
    assert [(g.group_id, g.error_code) for g in resp.groups] == [
        ("of-a", 0),
        ("of-b", 0),
        ("of-none", 0),
    ]
    assert fetched(resp, version, 0) == [("t1", 0, 5, 0), ("t1", 1, -1, 0)]
    assert fetched(resp, version, 1) == [("t1", 2, 9, 0)]  # null topics: all committed
    assert fetched(resp, version, 2) == [("t6", 0, -1, 0)]


@pytest.mark.parametrize("version", [7, 9])
async def test_offset_fetch_require_stable_sees_a_commit_in_flight(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    await client.offset_commit("rs", {("t1", 0): 1})
    commit = client.build_request(
        8,
        8,
        group_id="rs",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            {
                "name": "t1",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 2,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    )
    # Another writer holds the database's write lock, so our append waits (busy timeout 5 s).
    # Taken off the event loop: the node's own transactions need the loop to finish.
    db = sqlite3.connect(
        node.settings.database_url.split("///", 1)[1], isolation_level=None, check_same_thread=False
    )
    await asyncio.to_thread(db.execute, "BEGIN IMMEDIATE")
    # from another connection: replies are in request order, a fetch behind it would wait too
    committer = await node.client("committer")
    try:
        pending = committer.send(commit)

        async def unstable() -> bool:
            stable = await client.offset_fetch(
                "rs", [("t1", 0)], require_stable=True, version=version
            )
            return fetched(stable, version) == [("t1", 0, -1, Error.UNSTABLE_OFFSET_COMMIT)]

        # the node has the commit (a stable read sees it pending), and holds its reply
        await eventually(unstable, what="the commit pending")
        assert not pending.done()
        plain = await client.offset_fetch("rs", [("t1", 0)], version=version)
        # protocol.md §8.2: not yet durable
        assert fetched(plain, version) == [("t1", 0, 1, Error.NONE)]
        await asyncio.to_thread(db.execute, "ROLLBACK")
        assert commit_errors(await asyncio.wait_for(pending, 10)) == [("t1", 0, Error.NONE)]
    finally:
        db.close()
        await committer.close()
    stable = await client.offset_fetch("rs", [("t1", 0)], require_stable=True, version=version)
    assert fetched(stable, version) == [("t1", 0, 2, Error.NONE)]


@pytest.mark.parametrize("version", [1, 9])
async def test_offset_fetch_unknown_group(client: KafkaTestClient, version: int) -> None:
    resp = await client.offset_fetch("ghost", [("t1", 0), ("t6", 3)], version=version)
    assert fetched(resp, version) == [("t1", 0, -1, 0), ("t6", 3, -1, 0)]
    if version >= 2:
        every = await client.offset_fetch("ghost", None, version=version)
        assert fetched(every, version) == []


# --- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------------


@pytest.mark.parametrize("version", [0, 3, 4, 5])
async def test_describe_static_member(client: KafkaTestClient, version: int) -> None:
    member, _ = await stable_group(client, "ds", join_version=5, group_instance_id="inst-1")
    d = await describe(client, "ds", version)
    (m,) = d.members
    assert (d.group_state, m.member_id, m.member_assignment) == ("Stable", member, ASSIGNMENT)
    if version >= 4:
        assert m.group_instance_id == "inst-1"
    else:
        assert not hasattr(m, "group_instance_id")


@pytest.mark.parametrize("version", [0, 5])
async def test_describe_unknown_group_is_dead(client: KafkaTestClient, version: int) -> None:
    resp = await client.request(client.build_request(15, version, groups=["ghost", ""]))
    assert [
        (g.group_id, g.error_code, g.group_state, g.protocol_type, list(g.members))
        for g in resp.groups
    ] == [("ghost", 0, "Dead", "", []), ("", 0, "Dead", "", [])]


LISTED_STATES = {
    "ls-stable": "Stable",
    "ls-empty": "Empty",
    "ls-completing": "CompletingRebalance",
}


async def _three_states(client: KafkaTestClient) -> None:
    await stable_group(client, "ls-stable")
    await client.offset_commit("ls-empty", {("t1", 0): 1})  # a simple group: Empty
    joined = await join(client, "ls-completing")  # joined, never synced
    assert joined.error_code == Error.NONE


@pytest.mark.parametrize("version", [0, 3])
async def test_list_groups_before_v4_lists_all(client: KafkaTestClient, version: int) -> None:
    await _three_states(client)
    resp = await list_groups(client, version)
    assert resp.error_code == Error.NONE
    assert sorted((g.group_id, g.protocol_type) for g in resp.groups) == [
        ("ls-completing", "consumer"),
        ("ls-empty", ""),
        ("ls-stable", "consumer"),
    ]
    assert not hasattr(resp.groups[0], "group_state")


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], {"ls-stable", "ls-empty", "ls-completing"}),
        (["stable"], {"ls-stable"}),  # case-insensitive (protocol.md §9.2)
        (["Empty", "COMPLETINGREBALANCE"], {"ls-empty", "ls-completing"}),
        (["Dead"], set()),
    ],
)
@pytest.mark.parametrize("version", [4, 5])
async def test_list_groups_states_filter(
    client: KafkaTestClient, version: int, states: list[str], expected: set[str]
) -> None:
    await _three_states(client)
    resp = await list_groups(client, version, states=states)
    assert {g.group_id: g.group_state for g in resp.groups} == {
        gid: LISTED_STATES[gid] for gid in expected
    }


@pytest.mark.parametrize(
    ("types", "states", "expected"),
    [
        (["classic"], [], {"ls-stable", "ls-empty", "ls-completing"}),
        (["CLASSIC"], [], {"ls-stable", "ls-empty", "ls-completing"}),
        (["consumer"], [], set()),
        (["garbage"], [], set()),
        (["classic"], ["stable"], {"ls-stable"}),
    ],
)
async def test_list_groups_v5_types_filter(
    client: KafkaTestClient, types: list[str], states: list[str], expected: set[str]
) -> None:
    await _three_states(client)
    resp = await list_groups(client, 5, states=states, types=types)
    assert {g.group_id for g in resp.groups} == expected
    assert {g.group_type for g in resp.groups} <= {"classic"}


@pytest.mark.parametrize("version", [0, 2])
async def test_delete_groups_batch(client: KafkaTestClient, version: int) -> None:
    await stable_group(client, "del-busy")
    await client.offset_commit("del-empty", {("t1", 0): 3, ("t6", 2): 4})
    assert await delete_groups(client, ["del-busy", "del-empty", "del-ghost"], version) == [
        ("del-busy", Error.NON_EMPTY_GROUP),
        ("del-empty", Error.NONE),
        ("del-ghost", Error.GROUP_ID_NOT_FOUND),
    ]
    assert await committed(client, "del-empty", [("t1", 0), ("t6", 2)]) == [-1, -1]
    assert (await describe(client, "del-empty")).group_state == "Dead"
    assert (await describe(client, "del-busy")).group_state == "Stable"
    assert await delete_groups(client, ["del-empty"], version) == [
        ("del-empty", Error.GROUP_ID_NOT_FOUND)
    ]


# --- FindCoordinator / Metadata / ApiVersions ------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_find_coordinator_single_key(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    resp = await client.find_coordinator("any-group", version=version)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (
        0,
        1,
        "127.0.0.1",
        node.port,
    )


@pytest.mark.parametrize("version", [4, 5, 6])
async def test_find_coordinator_batched_keys(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    keys = ["a", "b", "c", ""]
    resp = await client.request(
        client.build_request(10, version, key_type=0, coordinator_keys=keys)
    )
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
        (k, 0, 1, "127.0.0.1", node.port) for k in keys
    ]


@pytest.mark.parametrize("version", [1, 6])
async def test_find_coordinator_transaction_key_has_no_coordinator(
    client: KafkaTestClient, version: int
) -> None:
    resp = await client.find_coordinator("tx-1", key_type=1, version=version)
    entry = resp.coordinators[0] if version >= 4 else resp
    assert (entry.error_code, entry.node_id, entry.host, entry.port) == (
        Error.COORDINATOR_NOT_AVAILABLE,
        -1,
        "",
        -1,
    )
    assert entry.error_message


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
async def test_metadata_lists_this_node_and_the_registry(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    resp = await client.metadata(["t1", "nope", "t6"], version=version)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", node.port)]
    assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == [
        ("t1", 0, 3),
        ("nope", Error.UNKNOWN_TOPIC_OR_PARTITION, 0),
        ("t6", 0, 6),
    ]
    for p in resp.topics[0].partitions:
        assert (p.error_code, p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) == (
            0,
            1,
            [1],
            [1],
        )
        if version >= 7:
            assert p.leader_epoch == -1
    if version >= 1:
        assert resp.controller_id == 1
    if version >= 2:
        assert resp.cluster_id


@pytest.mark.parametrize(
    ("version", "topics", "expected"),
    [
        (0, [], ["t1", "t6"]),  # v0: an empty list means all
        (1, [], []),
        (1, None, ["t1", "t6"]),  # v1+: null means all
        (13, [], []),
        (13, None, ["t1", "t6"]),
    ],
)
async def test_metadata_all_versus_none(
    client: KafkaTestClient, version: int, topics: list[str] | None, expected: list[str]
) -> None:
    resp = await client.metadata(topics, version=version)
    assert [t.name for t in resp.topics] == expected


@pytest.mark.parametrize("version", range(5))
async def test_api_versions_lists_every_api(client: KafkaTestClient, version: int) -> None:
    resp = await client.api_versions(version=version)
    assert resp.error_code == Error.NONE
    assert {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys} == {
        (a.key, a.min_version, a.max_version) for a in APIS
    }


@pytest.mark.parametrize("version", [5, 127])
async def test_api_versions_unsupported_version_answers_v0_with_keys(
    client: KafkaTestClient, version: int
) -> None:
    resp = await client.request_raw(
        18,
        version,
        b"\x00future-client\x00",
        load_response_schema(18, 0),
        flexible_header=True,
    )
    assert resp.error_code == Error.UNSUPPORTED_VERSION  # KIP-511
    assert {k.api_key for k in resp.api_keys} == {a.key for a in APIS}
    assert (await client.api_versions(version=3)).error_code == Error.NONE  # still connected


# --- data plane: ListOffsets / Fetch / Produce -----------------------------------------------


@pytest.mark.parametrize("version", [1, 11])
async def test_list_offsets_are_zero(client: KafkaTestClient, version: int) -> None:
    resp = await client.request(list_offsets_request(version))
    assert [
        (t.name, p.partition_index, p.error_code, p.offset)
        for t in resp.topics
        for p in t.partitions
    ] == [
        ("t1", 0, 0, 0),
        ("t1", 2, 0, 0),
        ("t1", 3, Error.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("nope", 0, Error.UNKNOWN_TOPIC_OR_PARTITION, -1),
    ]


@pytest.mark.parametrize("version", [4, 12])
async def test_fetch_returns_empty_partitions(client: KafkaTestClient, version: int) -> None:
    resp = await client.request(fetch_request(version, max_wait_ms=50))
    (topic,) = resp.responses
    assert [
        (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.records)
        for p in topic.partitions
    ] == [(0, 0, 0, 0, b""), (2, 0, 0, 0, b"")]
    unknown = await client.request(fetch_request(version, max_wait_ms=50, topic="nope"))
    assert {p.error_code for p in unknown.responses[0].partitions} == {
        Error.UNKNOWN_TOPIC_OR_PARTITION
    }


@pytest.mark.parametrize("version", [3, 9])
async def test_produce_is_refused(client: KafkaTestClient, version: int) -> None:
    resp = await client.request(produce_request(version, acks=-1))
    (topic,) = resp.responses
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [
        (0, Error.POLICY_VIOLATION),
        (1, Error.POLICY_VIOLATION),
    ]
    if version >= 8:
        assert {p.error_message for p in topic.partition_responses} == {
            "this node is a group coordinator and stores no messages"
        }
