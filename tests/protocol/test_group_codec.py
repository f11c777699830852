"""Group-plane APIs: requests encoded by kafka-python decode into the right internal types, and
our replies decode with kafka-python, at the lowest and highest advertised versions (and the
versions where the shape changes). What the edge decides before or after asking the coordinator
is checked against the real node, with kafka-python encoding the request and decoding the reply.
"""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    DeleteGroupsRequest as KpDeleteGroupsRequest,
)
from kafka.protocol.admin import (
    DeleteGroupsResponse as KpDeleteGroupsResponse,
)
from kafka.protocol.admin import (
    DescribeGroupsRequest as KpDescribeGroupsRequest,
)
from kafka.protocol.admin import (
    DescribeGroupsResponse as KpDescribeGroupsResponse,
)
from kafka.protocol.admin import (
    ListGroupsRequest as KpListGroupsRequest,
)
from kafka.protocol.admin import (
    ListGroupsResponse as KpListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest as KpHeartbeatRequest,
)
from kafka.protocol.consumer import (
    HeartbeatResponse as KpHeartbeatResponse,
)
from kafka.protocol.consumer import (
    JoinGroupRequest as KpJoinGroupRequest,
)
from kafka.protocol.consumer import (
    JoinGroupResponse as KpJoinGroupResponse,
)
from kafka.protocol.consumer import (
    LeaveGroupRequest as KpLeaveGroupRequest,
)
from kafka.protocol.consumer import (
    LeaveGroupResponse as KpLeaveGroupResponse,
)
from kafka.protocol.consumer import (
    OffsetCommitRequest as KpOffsetCommitRequest,
)
from kafka.protocol.consumer import (
    OffsetCommitResponse as KpOffsetCommitResponse,
)
from kafka.protocol.consumer import (
    OffsetFetchRequest as KpOffsetFetchRequest,
)
from kafka.protocol.consumer import (
    OffsetFetchResponse as KpOffsetFetchResponse,
)
from kafka.protocol.consumer import (
    SyncGroupRequest as KpSyncGroupRequest,
)
from kafka.protocol.consumer import (
    SyncGroupResponse as KpSyncGroupResponse,
)

from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    DescribedMember,
    Error,
    FetchedOffset,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMember,
    LeaveMemberResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupResponse,
)
from app.kafka import group_apis as g
from app.kafka import offset_apis as o
from app.kafka.codec import encode_body
from tests.protocol.groups import ASSIGNMENT, committed, describe, stable_group
from tests.protocol.wire import ctx, edge_decode, kp_call, kp_decode
from tests.support.kafka_client import KafkaTestClient

TOPICS = {"t1": 3, "t2": 1}


# --- JoinGroup -------------------------------------------------------------------------------


def _kp_join(instance_id: str | None = None, member_id: str = "") -> KpJoinGroupRequest:
    return KpJoinGroupRequest(
        group_id="g1",
        session_timeout_ms=6000,
        rebalance_timeout_ms=45000,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[
            KpJoinGroupRequest.JoinGroupRequestProtocol(
                name="cooperative-sticky", metadata=b"\x01"
            ),
            KpJoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x02"),
        ],
        reason="rebalance needed",
    )


def test_join_group_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    body = edge_decode(_kp_join(), 0)
    req = g.decode_join_group(body, client_id="kp", client_host="10.1.1.1")
    assert req.group_id == "g1"
    assert req.session_timeout_ms == 6000
    assert req.rebalance_timeout_ms == 6000
    assert req.protocol_type == "consumer"
    assert req.protocols == (("cooperative-sticky", b"\x01"), ("range", b"\x02"))
    assert req.group_instance_id is None
    assert req.reason is None
    assert (req.client_id, req.client_host) == ("kp", "10.1.1.1")
    assert req.require_known_member_id is False
    assert req.supports_skip_assignment is False


@pytest.mark.parametrize(
    ("version", "instance_id", "require_known", "skip"),
    [
        (1, None, False, False),
        (3, None, False, False),
        (4, None, True, False),
        (5, "inst-1", False, False),
        (5, None, True, False),
        (7, "inst-1", False, False),
        (8, None, True, False),
        (9, None, True, True),
        (9, "inst-1", False, True),
    ],
)
def test_join_group_capability_flags(
    version: int, instance_id: str | None, require_known: bool, skip: bool
) -> None:
    req = g.decode_join_group(edge_decode(_kp_join(instance_id), version))
    assert req.rebalance_timeout_ms == 45000
    assert req.group_instance_id == (instance_id if version >= 5 else None)
    assert req.require_known_member_id is require_known
    assert req.supports_skip_assignment is skip
    assert req.reason == ("rebalance needed" if version >= 8 else None)


@pytest.mark.parametrize("version", range(0, 10))
def test_join_group_error_reply_protocol_name_empty_before_v7(version: int) -> None:
    resp = kp_decode(
        KpJoinGroupResponse,
        11,
        version,
        g.encode_join_group(JoinGroupResponse(Error.MEMBER_ID_REQUIRED, member_id="m-1"), version),
    )
    assert resp.error_code == Error.MEMBER_ID_REQUIRED
    assert resp.generation_id == -1
    assert resp.member_id == "m-1"
    assert resp.leader == ""
    assert resp.protocol_name == ("" if version < 7 else None)
    if version >= 7:
        assert resp.protocol_type is None


@pytest.mark.parametrize("version", [0, 4, 5, 7, 9])
def test_join_group_leader_reply_round_trips(version: int) -> None:
    internal = JoinGroupResponse(
        Error.NONE,
        generation_id=4,
        protocol_type="consumer",
        protocol_name="range",
        leader="m-1",
        skip_assignment=True,
        member_id="m-1",
        members=(
            JoinGroupMember("m-1", "inst-1", b"meta-1"),
            JoinGroupMember("m-2", None, b"meta-2"),
        ),
    )
    resp = kp_decode(KpJoinGroupResponse, 11, version, g.encode_join_group(internal, version))
    assert (resp.error_code, resp.generation_id, resp.leader, resp.member_id) == (
        0,
        4,
        "m-1",
        "m-1",
    )
    assert resp.protocol_name == "range"
    assert [(m.member_id, bytes(m.metadata)) for m in resp.members] == [
        ("m-1", b"meta-1"),
        ("m-2", b"meta-2"),
    ]
    if version >= 5:
        assert [m.group_instance_id for m in resp.members] == ["inst-1", None]
    if version >= 7:
        assert resp.protocol_type == "consumer"
    if version >= 9:
        assert resp.skip_assignment is True


# --- SyncGroup -------------------------------------------------------------------------------


def _kp_sync(
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
    *,
    generation_id: int = 3,
    member_id: str = "m-1",
    group_instance_id: str | None = "inst-1",
) -> KpSyncGroupRequest:
    return KpSyncGroupRequest(
        group_id="g1",
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=[
            KpSyncGroupRequest.SyncGroupRequestAssignment(member_id="m-1", assignment=b"a1"),
            KpSyncGroupRequest.SyncGroupRequestAssignment(member_id="m-2", assignment=b"a2"),
        ],
    )


@pytest.mark.parametrize("version", [0, 3, 5])
def test_sync_group_decode(version: int) -> None:
    req = g.decode_sync_group(edge_decode(_kp_sync(), version))
    assert (req.group_id, req.generation_id, req.member_id) == ("g1", 3, "m-1")
    assert req.assignments == (("m-1", b"a1"), ("m-2", b"a2"))
    assert req.group_instance_id == ("inst-1" if version >= 3 else None)
    assert req.protocol_type == ("consumer" if version >= 5 else None)
    assert req.protocol_name == ("range" if version >= 5 else None)


@pytest.mark.parametrize("version", [0, 4, 5])
def test_sync_group_reply(version: int) -> None:
    resp = kp_decode(
        KpSyncGroupResponse,
        14,
        version,
        g.encode_sync_group(
            SyncGroupResponse(Error.NONE, "consumer", "range", b"assignment"), version
        ),
    )
    assert resp.error_code == 0
    assert bytes(resp.assignment) == b"assignment"
    if version >= 5:
        assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")


@pytest.mark.parametrize(("ptype", "pname"), [(None, "range"), ("consumer", None)])
async def test_sync_group_v5_without_protocol_is_refused_at_the_edge(
    client: KafkaTestClient, ptype: str | None, pname: str | None
) -> None:
    member, gen = await stable_group(client, "g1")
    # protocol.md §6.1 (KafkaApis): the coordinator itself would answer a Stable member at once
    kp_req = _kp_sync(ptype, pname, generation_id=gen, member_id=member, group_instance_id=None)
    resp = await kp_call(client, kp_req, 5, KpSyncGroupResponse)
    assert resp.error_code == Error.INCONSISTENT_GROUP_PROTOCOL
    assert (resp.protocol_type, resp.protocol_name) == (None, None)


async def test_sync_group_v4_without_protocol_goes_to_the_coordinator(
    client: KafkaTestClient,
) -> None:
    member, gen = await stable_group(client, "g1")
    kp_req = _kp_sync(None, None, generation_id=gen, member_id=member, group_instance_id=None)
    resp = await kp_call(client, kp_req, 4, KpSyncGroupResponse)
    assert (resp.error_code, bytes(resp.assignment)) == (Error.NONE, ASSIGNMENT)


# --- Heartbeat -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 5))
def test_heartbeat_decode(version: int) -> None:
    req = g.decode_heartbeat(
        edge_decode(
            KpHeartbeatRequest(
                group_id="g1", generation_id=7, member_id="m-1", group_instance_id="inst-1"
            ),
            version,
        )
    )
    assert (req.group_id, req.generation_id, req.member_id) == ("g1", 7, "m-1")
    assert req.group_instance_id == ("inst-1" if version >= 3 else None)


@pytest.mark.parametrize("version", range(0, 5))
@pytest.mark.parametrize(
    "error", [Error.NONE, Error.REBALANCE_IN_PROGRESS, Error.UNKNOWN_MEMBER_ID]
)
def test_heartbeat_hand_packed_reply_equals_kio_encoding(version: int, error: Error) -> None:
    packed = g.encode_heartbeat_body(error, version)
    from app.kafka.codec import build, response_class

    assert packed == encode_body(build(response_class(12, version), error_code=error))
    assert kp_decode(KpHeartbeatResponse, 12, version, packed).error_code == error


# --- LeaveGroup ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_v0_2_single_member_becomes_a_batch(version: int) -> None:
    req = g.decode_leave_group(
        edge_decode(KpLeaveGroupRequest(group_id="g1", member_id="m-1"), version)
    )
    assert req.group_id == "g1"
    assert req.members == (LeaveMember("m-1"),)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_v3_plus_batch(version: int) -> None:
    member = KpLeaveGroupRequest.MemberIdentity
    req = g.decode_leave_group(
        edge_decode(
            KpLeaveGroupRequest(
                group_id="g1",
                members=[
                    member(member_id="m-1", group_instance_id=None, reason="bye"),
                    member(member_id="", group_instance_id="inst-2", reason=None),
                ],
            ),
            version,
        )
    )
    assert req.members == (
        LeaveMember("m-1", None, "bye" if version >= 5 else None),
        LeaveMember("", "inst-2", None),
    )


@pytest.mark.parametrize("version", range(0, 6))
def test_leave_group_reply_error_placement(version: int) -> None:
    internal = LeaveGroupResponse(
        Error.NONE,
        (
            LeaveMemberResponse("m-1", None, Error.NONE),
            LeaveMemberResponse("m-2", "inst-2", Error.UNKNOWN_MEMBER_ID),
            LeaveMemberResponse("m-3", None, Error.FENCED_INSTANCE_ID),
        ),
    )
    resp = kp_decode(KpLeaveGroupResponse, 13, version, g.encode_leave_group(internal, version))
    if version < 3:
        # protocol.md §7.3: first non-NONE member error surfaces at the top
        assert resp.error_code == Error.UNKNOWN_MEMBER_ID
    else:
        assert resp.error_code == Error.NONE
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members] == [
            ("m-1", None, 0),
            ("m-2", "inst-2", 25),
            ("m-3", None, 82),
        ]


def test_leave_group_v0_top_level_error_wins() -> None:
    internal = LeaveGroupResponse(
        Error.NOT_COORDINATOR, (LeaveMemberResponse("m-1", None, Error.UNKNOWN_MEMBER_ID),)
    )
    resp = kp_decode(KpLeaveGroupResponse, 13, 0, g.encode_leave_group(internal, 0))
    assert resp.error_code == Error.NOT_COORDINATOR


# --- OffsetCommit ----------------------------------------------------------------------------


def _kp_commit(
    topics: dict[str, list[int]],
    *,
    generation_id: int = 5,
    member_id: str = "m-1",
    group_instance_id: str | None = "inst-1",
) -> KpOffsetCommitRequest:
    topic_cls = KpOffsetCommitRequest.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    return KpOffsetCommitRequest(
        group_id="g1",
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        retention_time_ms=86_400_000,
        topics=[
            topic_cls(
                name=t,
                partitions=[
                    part_cls(
                        partition_index=p,
                        committed_offset=100 + p,
                        committed_leader_epoch=3,
                        committed_metadata=None if p == 1 else f"md{p}",
                    )
                    for p in ps
                ],
            )
            for t, ps in topics.items()
        ],
    )


@pytest.mark.parametrize("version", [2, 4, 5, 6, 7, 8, 9])
def test_offset_commit_decode(version: int) -> None:
    body = edge_decode(_kp_commit({"t1": [0, 1], "nope": [0], "t2": [0, 5]}), version)
    req, refused = o.decode_offset_commit(body, TOPICS)
    assert (req.group_id, req.generation_id, req.member_id) == ("g1", 5, "m-1")
    assert req.group_instance_id == ("inst-1" if version >= 7 else None)
    assert req.retention_time_ms == (86_400_000 if version <= 4 else -1)
    assert req.unknown_group_not_found is (version >= 9)
    assert [(p.topic, p.partition, p.offset) for p in req.partitions] == [
        ("t1", 0, 100),
        ("t1", 1, 101),
        ("t2", 0, 100),
    ]
    assert [p.metadata for p in req.partitions] == ["md0", None, "md0"]
    assert {p.leader_epoch for p in req.partitions} == {3 if version >= 6 else -1}
    # protocol.md §8.2: unknown topic or partition answered at the edge
    assert refused == (
        PartitionResult("nope", 0, Error.UNKNOWN_TOPIC_OR_PARTITION),
        PartitionResult("t2", 5, Error.UNKNOWN_TOPIC_OR_PARTITION),
    )


@pytest.mark.parametrize("version", [2, 3, 8, 9])
async def test_offset_commit_merges_edge_errors_in_request_order(
    client: KafkaTestClient, version: int
) -> None:
    kp_req = _kp_commit(
        {"t1": [0], "nope": [0], "t6": [2]},
        generation_id=-1,  # a simple (memberless) commit: the node accepts it
        member_id="",
        group_instance_id=None,
    )
    resp = await kp_call(client, kp_req, version, KpOffsetCommitResponse)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics
    ] == [("t1", [(0, 0)]), ("nope", [(0, 3)]), ("t6", [(2, 0)])]
    assert await committed(client, "g1", [("t1", 0), ("t6", 2)]) == [100, 102]


async def test_offset_commit_all_unknown_never_reaches_the_coordinator(
    client: KafkaTestClient,
) -> None:
    # generation 5 for a group that does not exist: the coordinator would say
    # ILLEGAL_GENERATION; every partition is refused at the edge instead
    resp = await kp_call(client, _kp_commit({"nope": [0, 1]}), 8, KpOffsetCommitResponse)
    assert [p.error_code for t in resp.topics for p in t.partitions] == [3, 3]
    assert (await describe(client, "g1")).group_state == "Dead"


# --- OffsetFetch -----------------------------------------------------------------------------


def _kp_fetch_single(
    topics: dict[str, list[int]] | None, require_stable: bool = False
) -> KpOffsetFetchRequest:
    topic_cls = KpOffsetFetchRequest.OffsetFetchRequestTopic
    return KpOffsetFetchRequest(
        group_id="g1",
        require_stable=require_stable,
        topics=None
        if topics is None
        else [topic_cls(name=t, partition_indexes=ps) for t, ps in topics.items()],
    )


@pytest.mark.parametrize("version", [1, 2, 6, 7])
def test_offset_fetch_v1_7_single_group(version: int) -> None:
    body = edge_decode(_kp_fetch_single({"t1": [0, 2], "nope": [1]}, True), version)
    (q,) = o.decode_offset_fetch(body, TOPICS)
    assert q.request.group_id == "g1"
    assert q.request.partitions == (("t1", 0), ("t1", 2))
    assert q.requested == (("t1", 0), ("t1", 2), ("nope", 1))
    assert q.request.require_stable is (version >= 7)


@pytest.mark.parametrize("version", [2, 7])
def test_offset_fetch_null_topics_means_all(version: int) -> None:
    (q,) = o.decode_offset_fetch(edge_decode(_kp_fetch_single(None), version), TOPICS)
    assert q.request.partitions is None
    assert q.requested is None


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_v8_batched_groups(version: int) -> None:
    group_cls = KpOffsetFetchRequest.OffsetFetchRequestGroup
    topics_cls = group_cls.OffsetFetchRequestTopics
    body = edge_decode(
        KpOffsetFetchRequest(
            require_stable=True,
            groups=[
                group_cls(
                    group_id="g1",
                    member_id=None,
                    member_epoch=-1,
                    topics=[topics_cls(name="t1", partition_indexes=[1])],
                ),
                group_cls(group_id="g2", member_id=None, member_epoch=-1, topics=None),
            ],
        ),
        version,
    )
    q1, q2 = o.decode_offset_fetch(body, TOPICS)
    assert (q1.request.group_id, q1.request.partitions, q1.request.require_stable) == (
        "g1",
        (("t1", 1),),
        True,
    )
    assert (q2.request.group_id, q2.request.partitions) == ("g2", None)


def _fetch_answer(error: Error = Error.NONE) -> OffsetFetchResponse:
    return OffsetFetchResponse(
        "g1", error, () if error else (FetchedOffset("t1", 0, 42, 5, "md"), FetchedOffset("t1", 2))
    )


@pytest.mark.parametrize("version", [1, 2, 5, 7, 8, 9])
def test_offset_fetch_reply_success(version: int) -> None:
    (q,) = o.decode_offset_fetch(
        edge_decode(_kp_fetch_single({"t1": [0, 2], "nope": [1]}), min(version, 7)), TOPICS
    )
    merged = o.merge_offset_fetch(q, _fetch_answer(), TOPICS)
    resp = kp_decode(KpOffsetFetchResponse, 9, version, o.encode_offset_fetch([merged], version))
    if version >= 8:
        (group,) = resp.groups
        assert (group.group_id, group.error_code) == ("g1", 0)
        topics = group.topics
    else:
        topics = resp.topics
        if version >= 2:
            assert resp.error_code == 0
    rows = [
        (t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
        for t in topics
        for p in t.partitions
    ]
    assert rows == [("t1", 0, 42, "md", 0), ("t1", 2, -1, "", 0), ("nope", 1, -1, "", 3)]
    if version >= 5:
        assert [p.committed_leader_epoch for t in topics for p in t.partitions] == [5, -1, -1]


@pytest.mark.parametrize("version", [1, 2, 7, 8])
def test_offset_fetch_group_error_placement(version: int) -> None:
    (q,) = o.decode_offset_fetch(
        edge_decode(_kp_fetch_single({"t1": [0, 1]}), min(version, 7)), TOPICS
    )
    merged = o.merge_offset_fetch(q, _fetch_answer(Error.NOT_COORDINATOR), TOPICS)
    resp = kp_decode(KpOffsetFetchResponse, 9, version, o.encode_offset_fetch([merged], version))
    per_partition = [
        (p.partition_index, p.committed_offset, p.error_code)
        for t in getattr(resp, "topics", [])
        for p in t.partitions
    ]
    if version < 2:
        # protocol.md §8.3: v0-1 have no top-level error: every requested partition carries it
        assert per_partition == [(0, -1, 16), (1, -1, 16)]
    elif version < 8:
        # top level as in Kafka, and repeated per partition for aiokafka, which reads only those
        assert resp.error_code == Error.NOT_COORDINATOR
        assert per_partition == [(0, -1, 16), (1, -1, 16)]
    else:
        (group,) = resp.groups
        assert (group.error_code, group.topics) == (Error.NOT_COORDINATOR, [])


async def test_offset_fetch_batched_groups_against_the_node(client: KafkaTestClient) -> None:
    await client.offset_commit("g1", {("t1", 0): 9})
    group_cls = KpOffsetFetchRequest.OffsetFetchRequestGroup
    topics_cls = group_cls.OffsetFetchRequestTopics
    kp_req = KpOffsetFetchRequest(
        require_stable=False,
        groups=[
            group_cls(
                group_id="g1",
                member_id=None,
                member_epoch=-1,
                topics=[
                    topics_cls(name="t1", partition_indexes=[0, 1]),
                    topics_cls(name="nope", partition_indexes=[4]),
                ],
            ),
            group_cls(group_id="g2", member_id=None, member_epoch=-1, topics=None),
        ],
    )
    resp = await kp_call(client, kp_req, 8, KpOffsetFetchResponse)
    g1, g2 = resp.groups
    assert (g1.group_id, g1.error_code) == ("g1", 0)
    assert [
        (t.name, p.partition_index, p.committed_offset, p.error_code)
        for t in g1.topics
        for p in t.partitions
    ] == [("t1", 0, 9, 0), ("t1", 1, -1, 0), ("nope", 4, -1, 3)]
    assert (g2.group_id, g2.error_code, g2.topics) == ("g2", 0, [])


# --- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------------


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_describe_groups_reply(version: int) -> None:
    body = edge_decode(
        KpDescribeGroupsRequest(groups=["g1", "g2"], include_authorized_operations=True), version
    )
    assert list(body.groups) == ["g1", "g2"]
    groups = [
        DescribedGroup(
            "g1",
            Error.NONE,
            "Stable",
            "consumer",
            "range",
            (DescribedMember("m-1", "inst-1", "cid", "/10.0.0.1", b"meta", b"assign"),),
        ),
        DescribedGroup("g2", Error.NONE, "Dead"),
    ]
    resp = kp_decode(
        KpDescribeGroupsResponse, 15, version, g.encode_describe_groups(groups, version)
    )
    g1, g2 = resp.groups
    assert (g1.group_id, g1.error_code, g1.group_state, g1.protocol_type, g1.protocol_data) == (
        "g1",
        0,
        "Stable",
        "consumer",
        "range",
    )
    (m,) = g1.members
    assert (m.member_id, m.client_id, m.client_host) == ("m-1", "cid", "/10.0.0.1")
    assert (bytes(m.member_metadata), bytes(m.member_assignment)) == (b"meta", b"assign")
    if version >= 4:
        assert m.group_instance_id == "inst-1"
    assert (g2.group_state, g2.protocol_type, g2.members) == ("Dead", "", [])


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_list_groups_filters_and_reply(version: int) -> None:
    body = edge_decode(
        KpListGroupsRequest(states_filter=["Stable", "empty"], types_filter=["classic"]), version
    )
    req = g.decode_list_groups(body)
    assert req.states_filter == (("Stable", "empty") if version >= 4 else ())
    assert req.types_filter == (("classic",) if version >= 5 else ())
    resp = kp_decode(
        KpListGroupsResponse,
        16,
        version,
        g.encode_list_groups(
            ListGroupsResponse(Error.NONE, (ListedGroup("g1", "consumer", "Stable"),)), version
        ),
    )
    (listed,) = resp.groups
    assert (listed.group_id, listed.protocol_type) == ("g1", "consumer")
    if version >= 4:
        assert listed.group_state == "Stable"
    if version >= 5:
        assert listed.group_type == "classic"


@pytest.mark.parametrize("version", [0, 2])
def test_delete_groups_reply(version: int) -> None:
    body = edge_decode(KpDeleteGroupsRequest(groups_names=["g1", "g2"]), version)
    assert list(body.groups_names) == ["g1", "g2"]
    resp = kp_decode(
        KpDeleteGroupsResponse,
        42,
        version,
        g.encode_delete_groups(
            [DeleteGroupResult("g1", Error.NONE), DeleteGroupResult("g2", Error.NON_EMPTY_GROUP)],
            version,
        ),
    )
    assert [(r.group_id, r.error_code) for r in resp.results] == [("g1", 0), ("g2", 68)]


# --- handler failures have an error shape ----------------------------------------------------


def test_error_builders_echo_request_shape() -> None:
    body = edge_decode(_kp_commit({"t1": [0, 1]}), 8)
    packed = o.offset_commit_error(ctx(8), body, Error.UNKNOWN_SERVER_ERROR)
    resp = kp_decode(KpOffsetCommitResponse, 8, 8, packed)
    assert [e for _t, parts in resp.topics for _p, e in parts] == [-1, -1]
    body = edge_decode(KpDescribeGroupsRequest(groups=["a", "b"]), 5)
    packed = g.describe_groups_error(ctx(5), body, Error.UNKNOWN_SERVER_ERROR)
    resp = kp_decode(KpDescribeGroupsResponse, 15, 5, packed)
    assert [(x.group_id, x.error_code) for x in resp.groups] == [("a", -1), ("b", -1)]
    body = edge_decode(_kp_fetch_single({"t1": [0]}), 1)
    packed = o.offset_fetch_error(ctx(1), body, Error.UNKNOWN_SERVER_ERROR)
    resp = kp_decode(KpOffsetFetchResponse, 9, 1, packed)
    assert [p.error_code for t in resp.topics for p in t.partitions] == [-1]
