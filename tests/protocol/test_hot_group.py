"""The struct readers of JoinGroup, SyncGroup and OffsetCommit (app/kafka/hot_group.py) make the
very requests the generic path makes (bounds walk, kio, `decode_*` / `wire_offset_commit`) for
every version the node serves; any frame outside the common shape, and any frame the generic
path refuses, reads as None."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from prometheus_client import generate_latest

from app.group.messages import (
    Error,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.kafka import group_apis as g
from app.kafka import hot_group as hot_group_module
from app.kafka import offset_apis as o
from app.kafka.apis import DecodeLimits, version_table
from app.kafka.codec import build, response_class, td
from app.kafka.group_apis import decode_join_group, decode_sync_group
from app.kafka.hot_group import (
    OffsetCommitWire,
    read_join_group,
    read_offset_commit,
    read_sync_group,
)
from membership.wire import encode_request
from tests.protocol.groups import stable_group
from tests.protocol.wire import ctx
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

LIMITS = DecodeLimits()
HOST = "/10.0.0.7"


def generic_join(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    """What the generic path makes of the frame, or the exception it raises."""
    try:
        header, body = version_table()[(11, version)].decode(frame, limits)
        return decode_join_group(body, header.client_id or "", HOST)
    except Exception as exc:
        return exc


def generic_sync(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    try:
        _header, body = version_table()[(14, version)].decode(frame, limits)
        return decode_sync_group(body)
    except Exception as exc:
        return exc


def hot_join(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    return read_join_group(
        frame, version, limits.max_client_id_bytes, limits.max_request_elements, HOST
    )


def hot_sync(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    return read_sync_group(frame, version, limits.max_client_id_bytes, limits.max_request_elements)


def generic_commit(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    try:
        _header, body = version_table()[(8, version)].decode(frame, limits)
        return o.wire_offset_commit(body)
    except Exception as exc:
        return exc


def hot_commit(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    return read_offset_commit(
        frame, version, limits.max_client_id_bytes, limits.max_request_elements
    )


def commit_frame(version: int, client_id: str | None, **values: Any) -> bytes:
    cls = version_table()[(8, version)].request_cls
    values["retention_time"] = td(values.pop("retention_time_ms"))
    values["topics"] = [
        {
            "name": name,
            "partitions": [
                {
                    "partition_index": p,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "committed_metadata": metadata,
                }
                for p, offset, epoch, metadata in partitions
            ],
        }
        for name, partitions in values["topics"]
    ]
    return encode_request(build(cls, **values), 9, client_id)[4:]


def join_frame(version: int, client_id: str | None, **values: Any) -> bytes:
    cls = version_table()[(11, version)].request_cls
    values["session_timeout"] = td(values.pop("session_timeout_ms"))
    values["rebalance_timeout"] = td(values.pop("rebalance_timeout_ms"))
    values["protocols"] = [{"name": n, "metadata": m} for n, m in values["protocols"]]
    return encode_request(build(cls, **values), 9, client_id)[4:]


def sync_frame(version: int, client_id: str | None, **values: Any) -> bytes:
    cls = version_table()[(14, version)].request_cls
    values["assignments"] = [{"member_id": m, "assignment": a} for m, a in values["assignments"]]
    return encode_request(build(cls, **values), 9, client_id)[4:]


_text = st.text(max_size=30) | st.text(min_size=127, max_size=200)  # 1- and 2-byte varints
_blob = st.binary(max_size=30) | st.binary(min_size=127, max_size=300)
_int32 = st.integers(-(2**31), 2**31 - 1)
_client_id = st.none() | st.text(max_size=20)

_join_values = st.fixed_dictionaries(
    {
        "group_id": _text,
        "session_timeout_ms": _int32,
        "rebalance_timeout_ms": _int32,
        "member_id": _text,
        "group_instance_id": st.none() | _text,
        "protocol_type": _text,
        "protocols": st.lists(st.tuples(_text, _blob), max_size=4),
        "reason": st.none() | _text,
    }
)
_sync_values = st.fixed_dictionaries(
    {
        "group_id": _text,
        "generation_id": _int32,
        "member_id": _text,
        "group_instance_id": st.none() | _text,
        "protocol_type": st.none() | _text,
        "protocol_name": st.none() | _text,
        "assignments": st.lists(st.tuples(_text, _blob), max_size=140),
    }
)
_commit_values = st.fixed_dictionaries(
    {
        "group_id": _text,
        "generation_id_or_member_epoch": _int32,
        "member_id": _text,
        "group_instance_id": st.none() | _text,
        "retention_time_ms": st.integers(-1, 2**40),
        "topics": st.lists(
            st.tuples(
                _text,
                st.lists(
                    st.tuples(_int32, st.integers(-1, 2**63 - 1), _int32, st.none() | _text),
                    max_size=130,
                ),
            ),
            max_size=3,
        ),
    }
)


@settings(max_examples=200, deadline=None)
@given(values=_join_values, version=st.integers(0, 9), client_id=_client_id)
def test_join_group_reads_as_the_generic_path(
    values: dict[str, Any], version: int, client_id: str | None
) -> None:
    frame = join_frame(version, client_id, **values)
    expected = generic_join(frame, version)
    assert isinstance(expected, JoinGroupRequest)
    assert hot_join(frame, version) == expected


@settings(max_examples=200, deadline=None)
@given(values=_sync_values, version=st.integers(0, 5), client_id=_client_id)
def test_sync_group_reads_as_the_generic_path(
    values: dict[str, Any], version: int, client_id: str | None
) -> None:
    frame = sync_frame(version, client_id, **values)
    expected = generic_sync(frame, version)
    assert isinstance(expected, SyncGroupRequest)
    assert hot_sync(frame, version) == expected


@settings(max_examples=200, deadline=None)
@given(values=_commit_values, version=st.integers(2, 9), client_id=_client_id)
def test_offset_commit_reads_as_the_generic_path(
    values: dict[str, Any], version: int, client_id: str | None
) -> None:
    frame = commit_frame(version, client_id, **values)
    expected = generic_commit(frame, version)
    assert isinstance(expected, OffsetCommitWire)
    assert hot_commit(frame, version) == expected


@settings(max_examples=300, deadline=None)
@given(
    values=_commit_values,
    version=st.integers(2, 9),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_a_damaged_offset_commit_reads_as_the_generic_path_or_not_at_all(
    values: dict[str, Any], version: int, cut: int, flip: tuple[int, int]
) -> None:
    frame = bytearray(commit_frame(version, "c", **values))
    at, byte = flip
    if at < len(frame):
        frame[at] = byte
    damaged = bytes(frame[: len(frame) - cut % (len(frame) + 1)])
    got = hot_commit(damaged, version)
    if got is not None:
        assert got == generic_commit(damaged, version)


@settings(max_examples=300, deadline=None)
@given(
    values=_join_values,
    version=st.integers(0, 9),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_a_damaged_join_group_reads_as_the_generic_path_or_not_at_all(
    values: dict[str, Any], version: int, cut: int, flip: tuple[int, int]
) -> None:
    frame = bytearray(join_frame(version, "c", **values))
    at, byte = flip
    if at < len(frame):
        frame[at] = byte
    damaged = bytes(frame[: len(frame) - cut % (len(frame) + 1)])
    got = hot_join(damaged, version)
    if got is not None:
        assert got == generic_join(damaged, version)


@settings(max_examples=300, deadline=None)
@given(
    values=_sync_values,
    version=st.integers(0, 5),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_a_damaged_sync_group_reads_as_the_generic_path_or_not_at_all(
    values: dict[str, Any], version: int, cut: int, flip: tuple[int, int]
) -> None:
    frame = bytearray(sync_frame(version, "c", **values))
    at, byte = flip
    if at < len(frame):
        frame[at] = byte
    damaged = bytes(frame[: len(frame) - cut % (len(frame) + 1)])
    got = hot_sync(damaged, version)
    if got is not None:
        assert got == generic_sync(damaged, version)


_JOIN = {
    "group_id": "g",
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 30_000,
    "member_id": "m-1",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocols": [("range", b"meta")],
    "reason": None,
}
_SYNC = {
    "group_id": "g",
    "generation_id": 3,
    "member_id": "m-1",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "assignments": [("m-1", b"a1"), ("m-2", b"a2")],
}


@pytest.mark.parametrize("version", [6, 9])
def test_join_group_outside_the_common_shape_goes_to_the_generic_reader(version: int) -> None:
    frame = join_frame(version, "c", **_JOIN)
    assert hot_join(frame, version) == generic_join(frame, version)
    for damaged in [
        frame[:-1] + b"\x01\x63\x02hi",  # a tagged field in the body
        frame + b"\x00",  # trailing bytes
        frame[:-3],  # truncated
    ]:
        assert hot_join(damaged, version) is None
    # bounds the generic path enforces are the hot reader's too
    small = DecodeLimits(max_client_id_bytes=0)  # "c" is one byte
    assert isinstance(generic_join(frame, version, small), Exception)
    assert hot_join(frame, version, small) is None
    two = join_frame(version, None, **{**_JOIN, "protocols": [("a", b""), ("b", b"")]})
    assert isinstance(generic_join(two, version, DecodeLimits(max_request_elements=1)), Exception)
    assert hot_join(two, version, DecodeLimits(max_request_elements=1)) is None


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_sync_group_outside_the_common_shape_goes_to_the_generic_reader(version: int) -> None:
    frame = sync_frame(version, "c", **_SYNC)
    assert hot_sync(frame, version) == generic_sync(frame, version)
    tight = DecodeLimits(max_request_elements=1)
    assert isinstance(generic_sync(frame, version, tight), Exception)
    assert hot_sync(frame, version, tight) is None
    assert hot_sync(frame + b"\x00", version) is None
    assert hot_sync(frame[:-1], version) is None


_COMMIT = {
    "group_id": "g",
    "generation_id_or_member_epoch": 3,
    "member_id": "m-1",
    "group_instance_id": "i-1",
    "retention_time_ms": -1,
    "topics": [("t1", [(0, 10, 2, None), (1, 11, 2, "md")]), ("t2", [(0, 5, -1, "")])],
}


@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
def test_offset_commit_outside_the_common_shape_goes_to_the_generic_reader(version: int) -> None:
    frame = commit_frame(version, "c", **_COMMIT)
    assert hot_commit(frame, version) == generic_commit(frame, version)
    assert hot_commit(frame + b"\x00", version) is None  # trailing bytes
    assert hot_commit(frame[:-1], version) is None  # truncated
    if version >= 8:
        tagged = frame[:-1] + b"\x01\x63\x02hi"  # a tagged field in the body
        assert hot_commit(tagged, version) is None
    # the element bound is spent on topics and partitions together, as the bounds walk does
    for bound, refused in [(5, False), (4, True)]:
        limits = DecodeLimits(max_request_elements=bound)
        assert isinstance(generic_commit(frame, version, limits), Exception) is refused
        assert (hot_commit(frame, version, limits) is None) is refused
    small = DecodeLimits(max_client_id_bytes=0)
    assert isinstance(generic_commit(frame, version, small), Exception)
    assert hot_commit(frame, version, small) is None


class _Core:
    """Stands in for GroupCoordinator: keeps the internal request, answers a fixed reply."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def join_group(self, handle: int, req: JoinGroupRequest, now: int) -> Any:
        self.seen.append(req)
        return JoinGroupResponse(Error.NONE, 4, "consumer", "range", "m-1", False, req.member_id)

    def sync_group(self, handle: int, req: SyncGroupRequest, now: int) -> Any:
        self.seen.append(req)
        return SyncGroupResponse(Error.NONE, "consumer", "range", b"a1")

    def offset_commit(self, handle: int, req: OffsetCommitRequest, now: int) -> Any:
        self.seen.append(req)
        errors = [Error.NONE, Error.ILLEGAL_GENERATION]
        return OffsetCommitResponse(
            tuple(
                PartitionResult(p.topic, p.partition, errors[i % 2])
                for i, p in enumerate(req.partitions)
            )
        )


class _Service:
    topics = {"t1": 2}  # t2 is unknown

    def __init__(self) -> None:
        self.core = _Core()

    def schedule_write(self, name: str, group_id: str, op: Any, *args: Any, **kw: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(op(self.core, 1, 0))
        return fut


# interpreted only: a stand-in core, which the compiled edge refuses (it types the core)
@pytest.mark.pure_python
@pytest.mark.parametrize("version", [0, 5, 9])
async def test_the_handlers_serve_a_hot_read_request_as_kios(version: int) -> None:
    """handle_join_group, handle_sync_group and handle_offset_commit take what the hot readers
    make in place of kio's entity, and serve it alike (what server.py's hook hands them)."""
    service = _Service()
    context = ctx(version, client_id="c", client_host=HOST)
    context.service = service  # type: ignore[assignment]
    frame = join_frame(version, "c", **_JOIN)
    _header, body = version_table()[(11, version)].decode(frame)
    from_kio = await g.handle_join_group(context, body)
    from_hot = await g.handle_join_group(context, hot_join(frame, version))
    assert from_hot == from_kio
    assert service.core.seen[0] == service.core.seen[1]
    sync_version = min(version, 5)
    context.api_version = sync_version
    frame = sync_frame(sync_version, "c", **_SYNC)
    _header, body = version_table()[(14, sync_version)].decode(frame)
    assert await g.handle_sync_group(context, body) == await g.handle_sync_group(
        context, hot_sync(frame, sync_version)
    )
    assert service.core.seen[2] == service.core.seen[3]

    commit_version = max(version, 2)
    context.api_version = commit_version
    frame = commit_frame(commit_version, "c", **_COMMIT)
    _header, body = version_table()[(8, commit_version)].decode(frame)
    from_kio = await o.handle_offset_commit(context, body)
    assert from_kio == await o.handle_offset_commit(context, hot_commit(frame, commit_version))
    assert service.core.seen[4] == service.core.seen[5]
    assert [(p.topic, p.partition) for p in service.core.seen[4].partitions] == [
        ("t1", 0),
        ("t1", 1),
    ]
    # the reply in request order: the core's errors, then t2 refused at the edge
    reply, _ = entity_reader(response_class(8, commit_version))(from_kio, 0)
    assert [
        (t.name, p.partition_index, p.error_code) for t in reply.topics for p in t.partitions
    ] == [
        ("t1", 0, Error.NONE),
        ("t1", 1, Error.ILLEGAL_GENERATION),
        ("t2", 0, Error.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert o.offset_commit_error(context, body, Error.NOT_COORDINATOR) == o.offset_commit_error(
        context, hot_commit(frame, commit_version), Error.NOT_COORDINATOR
    )


def test_long_varints_read_as_kio_reads_them() -> None:
    """A length written in more bytes than it needs (0x80 0x00 is 0: null) means the same."""
    frame = sync_frame(5, "c", **{**_SYNC, "protocol_type": None})
    at = frame.index(b"\x00\x06range")  # protocol_type null, then protocol_name
    padded = frame[:at] + b"\x80\x00" + frame[at + 1 :]
    assert hot_sync(padded, 5) == generic_sync(padded, 5) == generic_sync(frame, 5)
    name = frame[: at + 1] + b"\x86\x00" + frame[at + 2 :]  # "range" with a 2-byte length
    assert hot_sync(name, 5) == generic_sync(name, 5) == generic_sync(frame, 5)


@pytest.mark.pure_python  # patches the hot path: interpreted only
async def test_a_live_offset_commit_is_served_alike_on_both_paths(
    node: RunningNode, client: KafkaTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a node: the common shape (hot path) and the same commit with a tagged field
    (generic path) get the same reply, both offsets are read back, and the metrics count them
    under error 0 (an OffsetCommit reply has no top-level error)."""
    hot_reads: list[bool] = []

    def spy(*args: Any) -> Any:
        got = read_offset_commit(*args)
        hot_reads.append(got is not None)
        return got

    monkeypatch.setattr(hot_group_module, "read_offset_commit", spy)
    member, gen = await stable_group(client, "hot-commit", group_instance_id="hc-i")
    values = {
        **_COMMIT,
        "group_id": "hot-commit",
        "generation_id_or_member_epoch": gen,
        "member_id": member,
        "group_instance_id": "hc-i",
        "topics": [("t1", [(0, 40, 1, "md"), (7, 1, 1, None)])],  # t1 has 3 partitions
    }
    common = commit_frame(8, "c", **values)[12:]  # the body after header v2
    tagged = common[:-1] + b"\x01\x63\x02hi"
    schema = response_class(8, 8)
    # the second commit, the generic way, moves partition 0 from offset 40 to 41
    again = tagged.replace(struct.pack(">q", 40), struct.pack(">q", 41), 1)
    replies = []
    for body, offset in ((common, 40), (again, 41)):
        resp = await client.request_raw(8, 8, body, schema, flexible_header=True)
        replies.append(
            [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]
        )
        fetched = await client.offset_fetch("hot-commit", [("t1", 0)])
        (topic,) = fetched.groups[0].topics
        assert [p.committed_offset for p in topic.partitions] == [offset]
    assert replies[0] == replies[1] == [(0, Error.NONE), (7, Error.UNKNOWN_TOPIC_OR_PARTITION)]
    assert hot_reads == [True, False]  # the first took the hot path, the tagged one did not
    metrics = generate_latest(node.node.metrics.registry).decode()
    assert 'coordinator_requests_total{api="OffsetCommit",error="0",version="8"} 2.0' in metrics


@pytest.mark.parametrize("version", [2, 4])
def test_a_retention_the_generic_path_cannot_read_is_left_to_it(version: int) -> None:
    # kio reads v2-4's retention as a timedelta of int64 microseconds: one millisecond past
    # that, the generic path rejects the frame, and the fast path must not accept it instead
    values = dict(
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id="m",
        group_instance_id=None,
        retention_time_ms=5,
        topics=[("t", [(0, 7, -1, None)])],
    )
    frame = bytearray(commit_frame(version, "c", **values))
    at = bytes(frame).index(struct.pack(">q", 5))
    edge = (2**63 - 1) // 1000
    for retention in (edge, edge + 1, -edge, -edge - 1, 2**63 - 1, -(2**63)):
        frame[at : at + 8] = struct.pack(">q", retention)
        expected = generic_commit(bytes(frame), version)
        got = hot_commit(bytes(frame), version)
        if abs(retention) <= edge:
            assert isinstance(expected, OffsetCommitWire)
            assert got == expected
        else:
            assert isinstance(expected, ValueError)
            assert got is None
