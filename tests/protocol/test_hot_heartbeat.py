"""Heartbeat's hot path (app/kafka/hot.py) reads what kio reads and answers the bytes kio writes;
every frame outside its common shape goes to the generic path, which decides as before."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import generate_latest

from app.group.messages import Error
from app.kafka.apis import version_table
from app.kafka.codec import build, encode_body, frame_response, response_class
from app.kafka.group_apis import decode_heartbeat
from app.kafka.hot import (
    MEMO_FRAME_BYTES,
    MEMO_FRAMES,
    HeartbeatReader,
    heartbeat_answer,
    read_heartbeat,
)
from app.runtime.placement import CACHED_ID_LENGTH
from membership.wire import encode_request
from tests.protocol.groups import stable_group, wait_for_state
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

MAX_CLIENT_ID = 4096
CASES = [
    ("g", 7, "m-1", None, "client"),
    ("grüße", -1, "", "inst-ü", None),  # UTF-8, empty member id, null client id
    ("g" * 126, 2**31 - 1, "m" * 126, "i" * 126, "c" * 300),  # the longest one-byte lengths
]


def frame_of(
    version: int, group: str, gen: int, member: str, inst: str | None, cid: str | None
) -> bytes:
    cls = version_table()[(12, version)].request_cls
    values = {"group_id": group, "generation_id": gen, "member_id": member}
    if version >= 3:
        values["group_instance_id"] = inst
    return encode_request(build(cls, **values), 42, cid)[4:]


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("case", CASES)
def test_the_hot_reader_reads_what_kio_reads(
    version: int, case: tuple[str, int, str, str | None, str | None]
) -> None:
    frame = frame_of(version, *case)
    _header, body = version_table()[(12, version)].decode(frame)
    kio = decode_heartbeat(body)
    assert read_heartbeat(frame, version, MAX_CLIENT_ID) == (
        kio.group_id,
        kio.generation_id,
        kio.member_id,
        kio.group_instance_id,
    )


def test_a_connections_reader_remembers_frames_within_its_bound() -> None:
    """A member resends the same bytes (but its correlation id): the reader answers them
    from its memo, reads anew what differs, and never holds more than its bound."""
    reader = HeartbeatReader(MAX_CLIENT_ID)
    frame = frame_of(4, "g", 7, "m-1", "i-1", "client")
    again = frame[:4] + struct.pack(">i", 99) + frame[8:]  # another correlation id
    assert reader.read(frame, 4) == reader.read(again, 4) == ("g", 7, "m-1", "i-1")
    assert len(reader.memo) == 1
    # the next generation is new bytes: read, not taken for the old one
    assert reader.read(frame_of(4, "g", 8, "m-1", "i-1", "client"), 4) == ("g", 8, "m-1", "i-1")
    # the same bytes under another version are read as that version (v3's strings differ)
    v3 = frame_of(3, "g", 7, "m-1", "i-1", "client")
    assert reader.read(v3, 3) == read_heartbeat(v3, 3, MAX_CLIENT_ID)
    # bounded: many members over one connection never hold more than MEMO_FRAMES frames
    for m in range(5 * MEMO_FRAMES):
        fields = reader.read(frame_of(4, "g", 7, f"m-{m}", None, "client"), 4)
        assert fields == ("g", 7, f"m-{m}", None)
        assert len(reader.memo) <= MEMO_FRAMES
    # large frames are read every time, never kept; frames the reader refuses are not kept
    big = frame_of(4, "g" * 126, 7, "m" * 126, "i" * 126, "c" * MEMO_FRAME_BYTES)
    before = len(reader.memo)
    assert reader.read(big, 4) == ("g" * 126, 7, "m" * 126, "i" * 126)
    assert reader.read(frame + b"\0", 4) is None  # a trailing byte
    assert len(reader.memo) == before


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize(
    "error",
    [Error.NONE, Error.REBALANCE_IN_PROGRESS, Error.FENCED_INSTANCE_ID, Error.NOT_COORDINATOR],
)
def test_the_hot_reply_is_the_bytes_kio_writes(version: int, error: Error) -> None:
    entry = version_table()[(12, version)]
    kio = build(response_class(12, version), error_code=ErrorCode(error))
    expected = frame_response(-5, entry.flexible_response_header, encode_body(kio))
    for _ in range(2):  # built, then from its cache
        # the pieces the connection writes around the request's correlation id bytes
        answer = heartbeat_answer(version, error)
        assert answer.size + struct.pack(">i", -5) + answer.tail == expected
        assert answer.metric_key == ("Heartbeat", version, error)


def test_frames_outside_the_common_shape_go_to_the_generic_reader() -> None:
    v4 = frame_of(4, "g", 1, "m", None, "c")
    assert read_heartbeat(v4, 4, MAX_CLIENT_ID) is not None
    tagged = v4[:-1] + b"\x01\x63\x02hi"  # a tagged field in the body
    header_tagged = v4[:11] + b"\x01\x63\x00" + v4[12:]
    long_id = frame_of(4, "g" * 127, 1, "m", None, "c")  # a two-byte compact length
    v0 = frame_of(0, "g", 1, "m", None, "c")
    for frame, version in [
        (tagged, 4),
        (header_tagged, 4),
        (long_id, 4),
        (v4 + b"\x00", 4),  # trailing bytes
        (v4[:-3], 4),  # truncated
        (v0[:-1], 0),
        (v0 + b"x", 0),
        (v0.replace(b"\x00\x01g", b"\xff\xffg", 1), 0),  # a null group id
        (v0.replace(b"\x00\x01m", b"\x00\x01\xff", 1), 0),  # not UTF-8
    ]:
        assert read_heartbeat(frame, version, MAX_CLIENT_ID) is None, frame
    # a client id over the bound is the generic reader's to reject
    assert read_heartbeat(frame_of(1, "g", 1, "m", None, "c" * 10), 1, 9) is None


async def test_both_paths_answer_alike_and_are_counted(
    node: RunningNode, client: KafkaTestClient
) -> None:
    member, gen = await stable_group(client, "hot", group_instance_id="hot-i")
    # the common shape takes the hot path; a tagged field sends the same request the generic way
    common = frame_of(4, "hot", gen, member, "hot-i", "c")[12:]  # body after header v2
    assert common[:4] == b"\x04hot"
    tagged = common[:-1] + b"\x01\x63\x02hi"
    schema = response_class(12, 4)
    for body in (common, tagged):
        resp = await client.request_raw(12, 4, body, schema, flexible_header=True)
        assert resp.error_code == Error.NONE
        stale = body.replace(struct.pack(">i", gen), struct.pack(">i", gen + 1), 1)
        resp = await client.request_raw(12, 4, stale, schema, flexible_header=True)
        assert resp.error_code == Error.ILLEGAL_GENERATION
        fenced = body.replace(member.encode(), b"x" * len(member), 1)
        resp = await client.request_raw(12, 4, fenced, schema, flexible_header=True)
        assert resp.error_code == Error.FENCED_INSTANCE_ID
    for v in range(4):  # every older version the hot path reads
        assert (await client.heartbeat("hot", gen, member, version=v)).error_code == Error.NONE
    metrics = generate_latest(node.node.metrics.registry).decode()
    assert 'coordinator_requests_total{api="Heartbeat",error="0",version="4"} 2.0' in metrics
    assert 'coordinator_requests_total{api="Heartbeat",error="22",version="4"} 2.0' in metrics
    assert 'coordinator_requests_total{api="Heartbeat",error="82",version="4"} 2.0' in metrics
    assert 'coordinator_requests_total{api="Heartbeat",error="0",version="0"} 1.0' in metrics


async def test_remembered_frames_are_answered_from_the_groups_state_now(
    node: RunningNode, client: KafkaTestClient
) -> None:
    """A connection remembers a member's Heartbeat bytes, never their answer: the same bytes,
    pipelined in one write with other requests between them, are each answered in order,
    under their own correlation ids, from the group's state when they arrive."""
    member, gen = await stable_group(client, "memo", group_instance_id="memo-i")
    request = client.heartbeat_request("memo", gen, member, group_instance_id="memo-i", version=4)
    frames = [client.encode(request, 1000 + i) for i in range(3)]
    replies = [client.expect(1000 + i, None) for i in range(3)]
    await client.send_raw(b"".join(frames))
    for i, reply in enumerate(replies):
        assert _error_of(await asyncio.wait_for(reply, 10)) == Error.NONE, i
    # a rebalance begins: the remembered bytes now get REBALANCE_IN_PROGRESS
    other = await node.client("memo-other")
    # (v3: no MEMBER_ID_REQUIRED round trip, the join starts the rebalance)
    joining = asyncio.ensure_future(other.join_group("memo", protocols=[("range", b"")], version=3))
    await wait_for_state(client, "memo", "PreparingRebalance")
    late = [client.expect(2000 + i, None) for i in range(2)]
    await client.send_raw(client.encode(request, 2000) + client.encode(request, 2001))
    for reply in late:
        assert _error_of(await asyncio.wait_for(reply, 10)) == Error.REBALANCE_IN_PROGRESS
    joining.cancel()
    await other.close()


def _error_of(reply: bytes) -> int:
    """A Heartbeat v4 reply after its correlation id: header tags (1), throttle (4), error."""
    return int(struct.unpack_from(">h", reply, 5)[0])


@pytest.mark.parametrize("length", [CACHED_ID_LENGTH + 1, 4096])
async def test_heartbeats_of_group_ids_past_the_routing_cache_take_the_full_route(
    client: KafkaTestClient, length: int
) -> None:
    """Ids longer than the placement cache holds (up to COORD_MAX_GROUP_ID_LENGTH) are routed
    by `route()` itself: the group works, and its errors are still precise."""
    group = "L" * length
    member, gen = await stable_group(client, group)
    for version in (0, 4):  # v0: the hot reader; v4: a two-byte compact length, the generic one
        assert (await client.heartbeat(group, gen, member, version=version)).error_code == 0
    assert (await client.heartbeat(group, gen + 1, member)).error_code == (Error.ILLEGAL_GENERATION)
    assert (await client.heartbeat(group, gen, "stranger")).error_code == Error.UNKNOWN_MEMBER_ID
