"""The struct-packed JoinGroup, SyncGroup, OffsetCommit and DescribeGroups replies
(app/kafka/group_replies.py) are kio's bytes:
for every version the node serves, over generated responses (property) and a table of edge
cases (nulls, empty and long strings, multi-byte varints, unknown error codes, non-ASCII)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import compiled
from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    DescribedMember,
    Error,
    FetchedOffset,
    JoinGroupMember,
    JoinGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupResponse,
)
from app.kafka import group_apis as g
from app.kafka.codec import build, encode_body, group_by_topic, response_class
from app.kafka.group_replies import (
    delete_groups_body,
    describe_groups_body,
    described_group_entry,
    join_group_body,
    list_groups_body,
    listed_group_entry,
    offset_commit_body,
    offset_fetch_body,
    sync_group_body,
)
from app.kafka.offset_apis import OFFSET_COMMIT, OFFSET_FETCH

JOIN_VERSIONS = range(0, 10)
SYNC_VERSIONS = range(0, 6)


def kio_join(resp: JoinGroupResponse, version: int) -> bytes:
    """kio's encoding of the reply, built the way group_apis did before the packed writers."""
    protocol_name = resp.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    obj: Any = build(
        response_class(g.JOIN_GROUP, version),
        error_code=resp.error,
        generation_id=resp.generation_id,
        protocol_type=resp.protocol_type,
        protocol_name=protocol_name,
        leader=resp.leader,
        skip_assignment=resp.skip_assignment,
        member_id=resp.member_id,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in resp.members
        ],
    )
    return encode_body(obj)


def kio_sync(resp: SyncGroupResponse, version: int) -> bytes:
    obj: Any = build(
        response_class(g.SYNC_GROUP, version),
        error_code=resp.error,
        protocol_type=resp.protocol_type,
        protocol_name=resp.protocol_name,
        assignment=resp.assignment,
    )
    return encode_body(obj)


def kio_commit(partitions: list[PartitionResult], version: int) -> bytes:
    obj: Any = build(
        response_class(OFFSET_COMMIT, version),
        topics=[
            {
                "name": name,
                "partitions": [
                    {"partition_index": p.partition, "error_code": p.error} for p in parts
                ],
            }
            for name, parts in group_by_topic((p.topic, p) for p in partitions).items()
        ],
    )
    return encode_body(obj)


def kio_describe(groups: list[tuple[DescribedGroup, int, str | None, int]], version: int) -> bytes:
    obj: Any = build(
        response_class(g.DESCRIBE_GROUPS, version),
        groups=[
            {
                "error_code": error,
                "error_message": message,
                "group_id": d.group_id,
                "group_state": d.state,
                "protocol_type": d.protocol_type,
                "protocol_data": d.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in d.members
                ],
                "authorized_operations": ops,
            }
            for d, error, message, ops in groups
        ],
    )
    return encode_body(obj)


def packed_describe(
    groups: list[tuple[DescribedGroup, int, str | None, int]], version: int
) -> bytes:
    entries = [described_group_entry(d, e, msg, ops, version) for d, e, msg, ops in groups]
    return describe_groups_body(entries, version)


def body(result: Any) -> bytes:
    return result if isinstance(result, bytes) else encode_body(result)


# --- generated responses -----------------------------------------------------------------------

_text = st.text(max_size=40) | st.text(min_size=120, max_size=300)  # 1- and 2-byte varints
_blob = st.binary(max_size=40) | st.binary(min_size=127, max_size=300)
# Error's members; interpreted, any int16 too (the encoder's fallback for a code kio lacks),
# which the compiled build refuses where the field is typed `Error`
_errors = st.sampled_from(list(Error))
if not compiled.active():
    _errors |= st.sampled_from([1, 99, 32767, -32768])
_int32 = st.integers(-(2**31), 2**31 - 1)

_members = st.lists(st.builds(JoinGroupMember, _text, st.none() | _text, _blob), max_size=140).map(
    tuple
)  # over 127 members: a two-byte compact array length

_join = st.builds(
    JoinGroupResponse,
    _errors,
    generation_id=_int32,
    protocol_type=st.none() | _text,
    protocol_name=st.none() | _text,
    leader=_text,
    skip_assignment=st.booleans(),
    member_id=_text,
    members=_members,
)
_sync = st.builds(
    SyncGroupResponse,
    _errors,
    protocol_type=st.none() | _text,
    protocol_name=st.none() | _text,
    assignment=_blob,
)


@settings(max_examples=150, deadline=None)
@given(resp=_join, version=st.sampled_from(JOIN_VERSIONS))
def test_join_group_body_is_kios_bytes(resp: JoinGroupResponse, version: int) -> None:
    assert join_group_body(resp, version) == kio_join(resp, version)


@settings(max_examples=150, deadline=None)
@given(resp=_sync, version=st.sampled_from(SYNC_VERSIONS))
def test_sync_group_body_is_kios_bytes(resp: SyncGroupResponse, version: int) -> None:
    assert sync_group_body(resp, version) == kio_sync(resp, version)


_commit_results = st.lists(
    st.builds(PartitionResult, st.sampled_from(["t1", "t2", "ü" * 70]) | _text, _int32, _errors),
    max_size=150,
)  # repeated topics (grouped, first-seen order), and over 127 partitions in one topic


@settings(max_examples=150, deadline=None)
@given(partitions=_commit_results, version=st.integers(2, 9))
def test_offset_commit_body_is_kios_bytes(partitions: list[PartitionResult], version: int) -> None:
    assert offset_commit_body(partitions, version) == kio_commit(partitions, version)


_described = st.builds(
    DescribedGroup,
    _text,
    _errors,
    _text,
    _text,
    _text,
    st.lists(
        st.builds(DescribedMember, _text, st.none() | _text, _text, _text, _blob, _blob),
        max_size=3,
    ).map(tuple),
)
_describe_groups = st.lists(
    st.tuples(_described, _errors, st.none() | _text, _int32), max_size=140
)  # over 127 groups: a two-byte compact array length


@settings(max_examples=150, deadline=None)
@given(groups=_describe_groups, version=st.integers(0, 6))
def test_describe_groups_body_is_kios_bytes(
    groups: list[tuple[DescribedGroup, int, str | None, int]], version: int
) -> None:
    assert packed_describe(groups, version) == kio_describe(groups, version)


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_groups_reply_is_kios_bytes(version: int) -> None:
    """The edge's encoder: a Stable group with members (instance ids, metadata, assignment), a
    missing one (GROUP_ID_NOT_FOUND with a message from v6, a Dead group before) and a refused
    one, with and without authorized operations."""
    stable = DescribedGroup(
        "g1",
        Error.NONE,
        "Stable",
        "consumer",
        "range",
        tuple(
            DescribedMember(f"m-{i}", None if i % 2 else f"i-{i}", "cid", "/10.0.0.1", b"m", b"a")
            for i in range(200)
        ),
    )
    missing = DescribedGroup("gone", Error.NONE, "Dead")
    refused = DescribedGroup("hidden", Error.GROUP_AUTHORIZATION_FAILED)
    groups = [stable, missing, refused]
    for operations, ops in ((None, -(2**31)), (lambda _g: 0b1010, 0b1010)):
        expected = []
        for d in groups:
            if version >= 6 and d is missing:
                error, message = Error.GROUP_ID_NOT_FOUND, "Group gone not found."
            else:
                error, message = d.error, None
            expected.append((d, error, message, ops if d.error == Error.NONE else -(2**31)))
        assert g.encode_describe_groups(groups, version, operations) == kio_describe(
            expected, version
        )


def kio_list(resp: ListGroupsResponse, version: int) -> bytes:
    obj: Any = build(
        response_class(g.LIST_GROUPS, version),
        error_code=resp.error,
        groups=[
            {
                "group_id": x.group_id,
                "protocol_type": x.protocol_type,
                "group_state": x.state,
                "group_type": x.group_type,
            }
            for x in resp.groups
        ],
    )
    return encode_body(obj)


def kio_delete(results: list[DeleteGroupResult], version: int) -> bytes:
    obj: Any = build(
        response_class(g.DELETE_GROUPS, version),
        results=[{"group_id": r.group_id, "error_code": r.error} for r in results],
    )
    return encode_body(obj)


_listed = st.builds(
    ListGroupsResponse,
    _errors,
    st.lists(st.builds(ListedGroup, _text, _text, _text, _text), max_size=140).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(resp=_listed, version=st.integers(0, 5))
def test_list_groups_body_is_kios_bytes(resp: ListGroupsResponse, version: int) -> None:
    entries = [listed_group_entry(x, version) for x in resp.groups]
    assert list_groups_body(resp.error, entries, version) == kio_list(resp, version)
    assert g.encode_list_groups(resp, version) == kio_list(resp, version)


@settings(max_examples=150, deadline=None)
@given(
    results=st.lists(st.builds(DeleteGroupResult, _text, _errors), max_size=140),
    version=st.integers(0, 2),
)
def test_delete_groups_body_is_kios_bytes(results: list[DeleteGroupResult], version: int) -> None:
    assert delete_groups_body(results, version) == kio_delete(results, version)


def kio_fetch(responses: list[OffsetFetchResponse], version: int) -> bytes:
    """kio's encoding, built the way offset_apis did before the packed writer."""

    def topics(r: OffsetFetchResponse) -> list[dict[str, Any]]:
        if r.error != Error.NONE and version >= 8:
            return []
        return [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "committed_offset": p.offset,
                        "committed_leader_epoch": p.leader_epoch,
                        "metadata": p.metadata,
                        "error_code": p.error,
                    }
                    for p in parts
                ],
            }
            for name, parts in group_by_topic((p.topic, p) for p in r.partitions).items()
        ]

    cls = response_class(OFFSET_FETCH, version)
    if version >= 8:
        groups = [
            {"group_id": r.group_id, "topics": topics(r), "error_code": r.error} for r in responses
        ]
        return encode_body(build(cls, groups=groups))
    (r,) = responses
    return encode_body(build(cls, topics=topics(r), error_code=r.error))


_fetched = st.builds(
    OffsetFetchResponse,
    _text,
    _errors,
    st.lists(
        st.builds(
            FetchedOffset,
            st.sampled_from(["t1", "t2", "ü" * 70]) | _text,
            _int32,
            st.integers(-(2**63), 2**63 - 1),
            _int32,
            _text,
            _errors,
        ),
        max_size=140,
    ).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(responses=st.lists(_fetched, min_size=1, max_size=3), version=st.integers(1, 9))
def test_offset_fetch_body_is_kios_bytes(
    responses: list[OffsetFetchResponse], version: int
) -> None:
    if version < 8:
        responses = responses[:1]  # one group before v8
    assert offset_fetch_body(responses, version) == kio_fetch(responses, version)


# --- a table of the shapes a rebalance produces ------------------------------------------------

_LEADER = JoinGroupResponse(
    Error.NONE,
    generation_id=7,
    protocol_type="consumer",
    protocol_name="range",
    leader="consumer-1-5f0c",
    skip_assignment=False,
    member_id="consumer-1-5f0c",
    members=tuple(
        JoinGroupMember(f"consumer-{i}-5f0c", None if i % 2 else f"inst-{i}", bytes(range(i % 200)))
        for i in range(300)
    ),
)
JOIN_CASES = [
    _LEADER,
    JoinGroupResponse(Error.NONE, 7, "consumer", "range", "consumer-1-5f0c", False, "m-2"),
    JoinGroupResponse(Error.NONE, 3, "consumer", "range", "l", True, "l", _LEADER.members[:2]),
    JoinGroupResponse(Error.MEMBER_ID_REQUIRED, member_id="m-ü-1"),
    JoinGroupResponse(Error.UNKNOWN_MEMBER_ID),
    JoinGroupResponse(Error.NONE, 0, None, None, "", False, ""),
]
SYNC_CASES = [
    SyncGroupResponse(Error.NONE, "consumer", "range", b"\x00\x03" + bytes(400)),
    SyncGroupResponse(Error.NONE, "consumer", "range", b""),
    SyncGroupResponse(Error.REBALANCE_IN_PROGRESS),
    SyncGroupResponse(Error.INCONSISTENT_GROUP_PROTOCOL, None, "range", b"x"),
]


@pytest.mark.parametrize("version", JOIN_VERSIONS)
@pytest.mark.parametrize("resp", JOIN_CASES)
def test_join_group_table(resp: JoinGroupResponse, version: int) -> None:
    assert join_group_body(resp, version) == kio_join(resp, version)
    # the edge's encoder answers the same bytes, whatever it returns
    assert body(g.encode_join_group(resp, version)) == kio_join(resp, version)


@pytest.mark.parametrize("version", SYNC_VERSIONS)
@pytest.mark.parametrize("resp", SYNC_CASES)
def test_sync_group_table(resp: SyncGroupResponse, version: int) -> None:
    assert sync_group_body(resp, version) == kio_sync(resp, version)
    assert body(g.encode_sync_group(resp, version)) == kio_sync(resp, version)


def test_out_of_range_fields_fail_like_kio() -> None:
    """A value kio refuses to encode is refused here too (the server then answers the error
    reply instead), never written as wrapped-around bytes."""
    bad = JoinGroupResponse(Error.NONE, generation_id=2**31)
    with pytest.raises(Exception):  # noqa: B017 - kio and struct raise different types
        kio_join(bad, 9)
    with pytest.raises(Exception):  # noqa: B017
        join_group_body(bad, 9)
    long_id = JoinGroupResponse(Error.NONE, member_id="x" * 40000)
    with pytest.raises(Exception):  # noqa: B017
        join_group_body(long_id, 4)


def test_replies_in_turn_each_get_their_own_fields() -> None:
    """The packed writers keep the fields shared by a join completion's replies; a reply that
    differs in any of them (or in version) is written from its own."""
    base = JoinGroupResponse(Error.NONE, 5, "consumer", "range", "l", False, "m-1")
    variants = [
        base,
        JoinGroupResponse(Error.NONE, 5, "consumer", "range", "l", False, "m-2"),
        JoinGroupResponse(Error.NONE, 6, "consumer", "range", "l", False, "m-1"),
        JoinGroupResponse(Error.NONE, 5, "consumer", "roundrobin", "l", False, "m-1"),
        JoinGroupResponse(Error.NONE, 5, None, "range", "l", False, "m-1"),
        JoinGroupResponse(Error.NONE, 5, "consumer", "range", "l2", False, "m-1"),
        JoinGroupResponse(Error.NONE, 5, "consumer", "range", "l", True, "m-1"),
        JoinGroupResponse(Error.REBALANCE_IN_PROGRESS, 5, "consumer", "range", "l", False, "m"),
        base,
    ]
    for version in (6, 9, 7, 9):
        for resp in variants:
            assert join_group_body(resp, version) == kio_join(resp, version)
    syncs = [
        SyncGroupResponse(Error.NONE, "consumer", "range", b"a"),
        SyncGroupResponse(Error.NONE, "consumer", "range", b"b"),
        SyncGroupResponse(Error.NONE, "consumer", None, b"b"),
        SyncGroupResponse(Error.UNKNOWN_MEMBER_ID),
        SyncGroupResponse(Error.NONE, "consumer", "range", b"a"),
    ]
    for version in (5, 4, 5):
        for sync in syncs:
            assert sync_group_body(sync, version) == kio_sync(sync, version)
