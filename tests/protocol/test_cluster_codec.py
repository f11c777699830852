"""ApiVersions, Metadata, FindCoordinator and the empty data plane (ListOffsets, Fetch, Produce),
cross-checked with kafka-python: requests it encodes go to the real node and its decoder reads
the replies. Plus the API table, the generic builder and tagged fields (no server needed)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.consumer import HeartbeatRequest as KpHeartbeatRequest
from kafka.protocol.consumer import JoinGroupRequest as KpJoinGroupRequest
from kafka.protocol.consumer import ListOffsetsRequest as KpListOffsetsRequest
from kafka.protocol.consumer import ListOffsetsResponse as KpListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata import FindCoordinatorRequest as KpFindCoordinatorRequest
from kafka.protocol.metadata import FindCoordinatorResponse as KpFindCoordinatorResponse
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse

from app.group.messages import Error
from app.kafka import cluster_apis as cl
from app.kafka.apis import (
    APIS,
    unsupported_api_versions_frame,
    version_table,
)
from app.kafka.codec import (
    build,
    element_class,
    encode_body,
    request_class,
    response_class,
    with_array,
)
from app.kafka.context import NO_RESPONSE
from app.kafka.tagged import strip_unknown_tags
from tests.protocol.wire import ctx, edge_decode, kp_call
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient, encode_request

# --- the table -------------------------------------------------------------------------------

EXPECTED_RANGES = {
    "ApiVersions": (0, 4),
    "Metadata": (0, 13),
    "FindCoordinator": (0, 6),
    "DescribeCluster": (0, 2),
    "JoinGroup": (0, 9),
    "SyncGroup": (0, 5),
    "Heartbeat": (0, 4),
    "LeaveGroup": (0, 5),
    "OffsetCommit": (2, 9),
    "OffsetFetch": (1, 9),
    "OffsetDelete": (0, 0),
    "DescribeGroups": (0, 6),
    "ListGroups": (0, 5),
    "DeleteGroups": (0, 2),
    "ListOffsets": (1, 11),
    "Fetch": (4, 12),
    "Produce": (3, 9),
    "SaslHandshake": (0, 1),
    "SaslAuthenticate": (0, 2),
    "DescribeAcls": (1, 3),
    "CreateAcls": (1, 3),
    "DeleteAcls": (1, 3),
    "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0),
}


def test_advertised_table() -> None:
    assert {a.name: (a.min_version, a.max_version) for a in APIS} == EXPECTED_RANGES
    table = version_table()
    assert len(table) == sum(hi - lo + 1 for lo, hi in EXPECTED_RANGES.values())
    # librdkafka enables MsgVer2 (and so fetching at all) only with Produce >= 3 and Fetch >= 4
    assert (0, 3) in table and (1, 4) in table


# --- ApiVersions -----------------------------------------------------------------------------


def _kp_api_versions(name: str = "kafka-python", ver: str = "3.0.12") -> KpApiVersionsRequest:
    return KpApiVersionsRequest(client_software_name=name, client_software_version=ver)


@pytest.mark.parametrize("version", range(0, 5))
async def test_api_versions_lists_the_table(client: KafkaTestClient, version: int) -> None:
    resp = await kp_call(client, _kp_api_versions(), version, KpApiVersionsResponse)
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {
        a.key: (a.min_version, a.max_version) for a in APIS
    }


@pytest.mark.parametrize(
    ("name", "ver"),
    [("kafka python", "1.0"), ("-bad", "1.0"), ("ok", "1.0-"), ("", "1"), ("ok", "1.0_rc1")],
)
async def test_api_versions_v3_rejects_bad_software_names(
    client: KafkaTestClient, name: str, ver: str
) -> None:
    # Read with kio: kafka-python decodes every ApiVersions error reply as v0 (its KIP-511
    # fallback), while Kafka answers INVALID_REQUEST at the request's version, as we do.
    resp = await client.api_versions(version=3, software_name=name, software_version=ver)
    assert resp.error_code == Error.INVALID_REQUEST
    assert list(resp.api_keys) == []
    assert (await client.api_versions(version=3)).error_code == Error.NONE  # still connected


async def test_api_versions_accepts_librdkafka_style_names(client: KafkaTestClient) -> None:
    kp_req = _kp_api_versions("confluent-kafka-python", "2.16.1-rdkafka-2.16.0")
    resp = await kp_call(client, kp_req, 3, KpApiVersionsResponse)
    assert resp.error_code == Error.NONE


def test_unsupported_api_versions_reply_is_v0_with_every_key() -> None:
    frame = unsupported_api_versions_frame(77)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    resp = KpApiVersionsResponse.decode(frame[4:], version=0, header=True)
    assert resp.header.correlation_id == 77
    assert resp.error_code == Error.UNSUPPORTED_VERSION
    assert {k.api_key for k in resp.api_keys} == {a.key for a in APIS}


# --- Metadata --------------------------------------------------------------------------------


def _kp_metadata(topics: list[str] | None) -> KpMetadataRequest:
    topic_cls = KpMetadataRequest.MetadataRequestTopic
    return KpMetadataRequest(
        topics=None if topics is None else [topic_cls(name=t) for t in topics],
        allow_auto_topic_creation=True,
    )


async def _metadata(client: KafkaTestClient, version: int, topics: list[str] | None) -> Any:
    return await kp_call(client, _kp_metadata(topics), version, KpMetadataResponse)


@pytest.mark.node_settings(node_id=3)
@pytest.mark.parametrize("version", [0, 1, 5, 9, 12, 13])
async def test_metadata_describes_this_node_as_leader_of_everything(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    resp = await _metadata(client, version, ["t1"])
    (broker,) = resp.brokers
    assert (broker.node_id, broker.host, broker.port) == (3, "127.0.0.1", node.port)
    (topic,) = resp.topics
    assert (topic.error_code, topic.name) == (0, "t1")
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    for p in topic.partitions:
        assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) == (0, 3, [3], [3])
        if version >= 7:
            assert p.leader_epoch == -1
    if version >= 1:
        assert resp.controller_id == 3
        assert topic.is_internal is False
    if version >= 2:
        assert resp.cluster_id == node.node.cluster_id
    if version >= 10:
        # all-zero (decoded as None): a real id would push librdkafka to Fetch v13+
        assert topic.topic_id is None or topic.topic_id.int == 0


@pytest.mark.parametrize(
    ("version", "topics", "expected"),
    [
        (0, [], ["t1", "t6"]),  # v0: empty list = all
        (1, [], []),  # v1+: empty list = none
        (1, None, ["t1", "t6"]),  # v1+: null = all
        (13, None, ["t1", "t6"]),
        (13, [], []),
    ],
)
async def test_metadata_all_versus_none(
    client: KafkaTestClient, version: int, topics: list[str] | None, expected: list[str]
) -> None:
    resp = await _metadata(client, version, topics)
    assert [t.name for t in resp.topics] == expected


@pytest.mark.parametrize("version", [0, 13])
async def test_metadata_unknown_topic(client: KafkaTestClient, version: int) -> None:
    resp = await _metadata(client, version, ["nope", "t6"])
    assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == [
        ("nope", 3, 0),
        ("t6", 0, 6),
    ]


@pytest.mark.parametrize("version", range(0, 14))
def test_a_reply_spliced_from_its_elements_is_kios_bytes(version: int) -> None:
    """Metadata replies are written a topic at a time (`with_array`): the body is the one kio
    writes for the whole reply, in every version, past 127 topics (a two-byte count) too."""
    cls = response_class(cl.METADATA, version)
    topics = [
        cl._topic_entry(f"t-{i}", i % 4, 3, i) if i % 3 else {"error_code": 3, "name": f"u{i}"}
        for i in range(130)
    ]
    fields: dict[str, Any] = {
        "brokers": [{"node_id": 3, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 3,
        "cluster_authorized_operations": 5,
        "error_code": Error.NONE,
    }
    whole = encode_body(build(cls, topics=topics, **fields))
    empty = encode_body(build(cls, topics=[], **fields))
    elements = [encode_body(build(element_class(cls, "topics"), **t)) for t in topics]
    assert with_array(cls, empty, "topics", elements) == whole
    assert with_array(cls, empty, "topics", []) == empty
    with pytest.raises(TypeError):
        element_class(cls, "controller_id")


async def test_metadata_naming_thousands_of_topics_answers_each_in_order(
    client: KafkaTestClient,
) -> None:
    names = [f"nope-{i}" for i in range(2_100)] + ["t6", "nope-7", "t1"]
    resp = await _metadata(client, 12, names)
    answered = [(t.name, t.error_code, len(t.partitions)) for t in resp.topics]
    assert answered[:2] == [("nope-0", 3, 0), ("nope-1", 3, 0)]
    assert answered[-2:] == [("t6", 0, 6), ("t1", 0, 3)]  # nope-7 named twice: answered once
    assert len(answered) == 2_102


# --- FindCoordinator -------------------------------------------------------------------------


@pytest.mark.node_settings(node_id=2)
@pytest.mark.parametrize("version", [0, 1, 3])
async def test_find_coordinator_single_key(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    kp_req = KpFindCoordinatorRequest(key="g1", key_type=0)
    resp = await kp_call(client, kp_req, version, KpFindCoordinatorResponse)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (
        0,
        2,
        "127.0.0.1",
        node.port,
    )


@pytest.mark.node_settings(node_id=2)
@pytest.mark.parametrize("version", [4, 6])
async def test_find_coordinator_batched_keys(
    node: RunningNode, client: KafkaTestClient, version: int
) -> None:
    kp_req = KpFindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"])
    resp = await kp_call(client, kp_req, version, KpFindCoordinatorResponse)
    assert [(c.key, c.node_id, c.port, c.error_code) for c in resp.coordinators] == [
        ("g1", 2, node.port, 0),
        ("g2", 2, node.port, 0),
    ]


@pytest.mark.parametrize("version", [1, 6])
async def test_find_coordinator_error_has_no_node(client: KafkaTestClient, version: int) -> None:
    kp_req = KpFindCoordinatorRequest(key="tx", key_type=1, coordinator_keys=["tx"])
    resp = await kp_call(client, kp_req, version, KpFindCoordinatorResponse)
    entry = resp.coordinators[0] if version >= 4 else resp
    # transactions are not coordinated here
    assert (entry.error_code, entry.node_id, entry.host, entry.port) == (15, -1, "", -1)
    assert entry.error_message


# --- ListOffsets / Fetch / Produce -----------------------------------------------------------


@pytest.mark.parametrize("version", [1, 3, 7, 11])
async def test_list_offsets_answers_zero(client: KafkaTestClient, version: int) -> None:
    topic_cls = KpListOffsetsRequest.ListOffsetsTopic
    part_cls = topic_cls.ListOffsetsPartition
    kp_req = KpListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic_cls(
                name="t1",
                partitions=[
                    part_cls(partition_index=0, timestamp=-2, current_leader_epoch=-1),
                    part_cls(partition_index=9, timestamp=-1, current_leader_epoch=-1),
                ],
            )
        ],
    )
    resp = await kp_call(client, kp_req, version, KpListOffsetsResponse)
    (topic,) = resp.topics
    p0, p9 = topic.partitions
    assert (p0.error_code, p0.offset, p0.timestamp) == (0, 0, -1)
    assert p9.error_code == Error.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 4:
        assert p0.leader_epoch == -1


def _kp_fetch(max_wait_ms: int, min_bytes: int = 1, topic: str = "t1") -> KpFetchRequest:
    topic_cls = KpFetchRequest.FetchTopic
    part_cls = topic_cls.FetchPartition
    return KpFetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        topics=[
            topic_cls(
                topic=topic,
                partitions=[
                    part_cls(
                        partition=0,
                        fetch_offset=7,
                        partition_max_bytes=1 << 20,
                        current_leader_epoch=-1,
                        log_start_offset=-1,
                        last_fetched_epoch=-1,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
    )


@pytest.mark.parametrize("version", [4, 7, 11, 12])
async def test_fetch_returns_empty_records_not_null(client: KafkaTestClient, version: int) -> None:
    resp = await kp_call(client, _kp_fetch(max_wait_ms=0), version, KpFetchResponse)
    ((topic,),) = [resp.responses]
    (p,) = topic.partitions
    assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset) == (0, 0, 0, 0)
    assert p.records is not None and bytes(p.records) == b""
    assert p.aborted_transactions is None
    if version >= 7:
        assert (resp.error_code, resp.session_id) == (0, 0)
    if version >= 11:
        assert p.preferred_read_replica == -1


async def test_fetch_unknown_topic_answers_at_once(client: KafkaTestClient) -> None:
    kp_req = _kp_fetch(max_wait_ms=10_000, topic="nope")
    resp = await asyncio.wait_for(kp_call(client, kp_req, 12, KpFetchResponse), 5)
    assert resp.responses[0].partitions[0].error_code == Error.UNKNOWN_TOPIC_OR_PARTITION


def _kp_produce(acks: int) -> KpProduceRequest:
    topic_cls = KpProduceRequest.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    return KpProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            topic_cls(
                name="t1",
                partition_data=[
                    part_cls(index=0, records=b"\x00" * 10),
                    part_cls(index=1, records=None),
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", [3, 5, 8, 9])
async def test_produce_is_refused_per_partition(client: KafkaTestClient, version: int) -> None:
    resp = await kp_call(client, _kp_produce(acks=-1), version, KpProduceResponse)
    (topic,) = resp.responses
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [(0, 44), (1, 44)]
    if version >= 8:
        assert {p.error_message for p in topic.partition_responses} == {
            "this node is a group coordinator and stores no messages"
        }


def test_produce_acks_0_gets_no_reply() -> None:
    body = edge_decode(_kp_produce(acks=0), 9)
    assert cl.handle_produce(ctx(9), body) is NO_RESPONSE


# --- generic builder -------------------------------------------------------------------------


def test_build_drops_fields_the_version_lacks_and_fills_zero() -> None:
    resp = build(
        response_class(11, 0),
        error_code=Error.NONE,
        protocol_type="consumer",
        skip_assignment=True,
        member_id="m",
    )
    assert resp.member_id == "m"
    assert resp.protocol_name == "" and resp.leader == "" and resp.members == ()
    assert not hasattr(resp, "protocol_type")


def test_build_rejects_names_no_version_has() -> None:
    with pytest.raises(TypeError, match="membr_id"):
        build(response_class(11, 9), membr_id="typo")


# --- unknown tagged fields -------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _with_tags(tags: dict[int, bytes]) -> bytes:
    out = _uvarint(len(tags))
    for tag, raw in sorted(tags.items()):
        out += _uvarint(tag) + _uvarint(len(raw)) + raw
    return out


def _kp_frame(kp_request: Any, version: int) -> bytes:
    kp_request.with_header(correlation_id=5, client_id="kp")
    return bytes(kp_request.encode(version=version, header=True))


def test_unknown_tag_in_body_is_skipped() -> None:
    frame = _kp_frame(
        KpHeartbeatRequest(group_id="g1", generation_id=2, member_id="m-1", group_instance_id=None),
        4,
    )
    assert frame.endswith(b"\x00")  # body's empty tagged-field section
    tagged = frame[:-1] + _with_tags({99: b"hello"})
    header, body = version_table()[(12, 4)].decode(tagged)
    assert (header.correlation_id, body.group_id, body.generation_id) == (5, "g1", 2)


def test_unknown_tag_in_request_header_is_skipped() -> None:
    frame = _kp_frame(
        KpHeartbeatRequest(group_id="g1", generation_id=2, member_id="m-1", group_instance_id=None),
        4,
    )
    # header v2 = api_key, version, correlation id, legacy client_id "kp", tagged fields
    header_end = 2 + 2 + 4 + 2 + 2
    assert frame[header_end] == 0
    tagged = frame[:header_end] + _with_tags({7: b"\x01\x02", 300: b""}) + frame[header_end + 1 :]
    header, body = version_table()[(12, 4)].decode(tagged)
    assert (header.client_id, body.member_id) == ("kp", "m-1")


def test_unknown_tag_in_nested_struct_is_skipped() -> None:
    req = KpJoinGroupRequest(
        group_id="g1",
        session_timeout_ms=6000,
        rebalance_timeout_ms=9000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        reason=None,
        protocols=[KpJoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"md")],
    )
    frame = _kp_frame(req, 9)
    nested = b"\x06range\x03md\x00"  # compact name, compact bytes, no tags
    assert nested in frame
    tagged = frame.replace(nested, b"\x06range\x03md" + _with_tags({5: b"x"}))
    _, body = version_table()[(11, 9)].decode(tagged)
    assert body.protocols[0].name == "range" and body.protocols[0].metadata == b"md"


def test_known_tags_survive_stripping() -> None:
    # FetchRequest v12 has a known tagged field (ClusterId, tag 0) at top level
    req = build(
        request_class(1, 12),
        cluster_id="c-1",
        replica_id=-1,
        max_wait=500,
        min_bytes=1,
        max_bytes=1000,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    data = encode_request(req, 9, "kp")[4:]
    assert data.endswith(_with_tags({0: b"\x04c-1"}))
    tagged = data[: -len(_with_tags({0: b"\x04c-1"}))] + _with_tags({0: b"\x04c-1", 42: b"zz"})
    stripped = strip_unknown_tags(request_class(1, 12), tagged)
    assert stripped == data
    _, body = version_table()[(1, 12)].decode(tagged)
    assert body.cluster_id == "c-1"
