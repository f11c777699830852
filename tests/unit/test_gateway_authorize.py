"""Our ACLs on relayed requests (app/gateway/authorize.py), on frames as clients write them: what
goes upstream, what is answered here, and how the denied answers join the upstream's reply."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from app.gateway import authorize, rewrite
from app.gateway.authorize import Caller, Verdict, check
from app.gateway.routes import Malformed, produce_topics
from app.kafka.apis import DEFAULT_DECODE_LIMITS
from app.kafka.codec import build
from app.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from membership.wire import encode_request
from tests.support.decisions import Decisions

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
ORDERS_ID = uuid.UUID(int=7)
SECRET_ID = uuid.UUID(int=9)


def acl(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
    principal: str = "User:alice",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


ALICE = Decisions(
    [
        acl(TOPIC, "orders", Op.WRITE),
        acl(TOPIC, "orders", Op.READ),
        acl(TOPIC, "secret", Op.READ, DENY, principal="User:*"),
        acl(TOPIC, "public-", Op.DESCRIBE, pattern=PatternType.PREFIXED),
        acl(TXN, "tx-alice", Op.WRITE),
    ],
    super_users=frozenset({"User:admin"}),
)


def caller(principal: str = "User:alice") -> Caller:
    return Caller(ALICE, principal, "127.0.0.1", {ORDERS_ID: "orders", SECRET_ID: "secret"})


def frame(api_key: int, version: int, **values: Any) -> bytes:
    request = build(load_request_schema(api_key, version), **values)
    return encode_request(request, 41, "client-1")[4:]


def reply_of(api_key: int, version: int, **values: Any) -> bytes:
    """A reply frame (size prefix included) as the upstream would write it."""
    cls = load_response_schema(api_key, version)
    return rewrite.encode(41, int(cls.__header_schema__.__version__) >= 1, build(cls, **values))


def local(verdict: Verdict | None, api_key: int, version: int) -> Any:
    assert verdict is not None and verdict.frame is None and verdict.reply is not None
    correlation_id, _, body = rewrite.decode(verdict.reply, api_key, version)
    assert correlation_id == 41
    return body


def relayed_body(verdict: Verdict, api_key: int, version: int) -> Any:
    """What the upstream would read of the request the verdict relays."""
    assert verdict.frame is not None
    return authorize._Request.decode(verdict.frame, api_key, version, DEFAULT_DECODE_LIMITS).body


def produce(
    version: int,
    *topics: str,
    acks: int = -1,
    transactional_id: str | None = None,
) -> bytes:
    return frame(
        0,
        version,
        transactional_id=transactional_id,
        acks=acks,
        timeout=1000,
        topic_data=[
            {
                "name": t,
                "partition_data": [
                    {"index": 0, "records": b"batch-" + t.encode()},
                    {"index": 2, "records": None},
                ],
            }
            for t in topics
        ],
    )


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_produce_topics_are_read_past_their_batches(version: int) -> None:
    data = produce(version, "orders", "audit-log", acks=1, transactional_id="tx-alice")
    assert produce_topics(data, version) == ("tx-alice", 1, ["orders", "audit-log"])
    with pytest.raises(Malformed):
        produce_topics(data[:-3], version)


@pytest.mark.parametrize("version", [3, 9])
def test_an_allowed_produce_goes_upstream_as_it_came(version: int) -> None:
    assert check(produce(version, "orders"), 0, version, caller()) is None
    assert check(produce(version, "anything"), 0, version, caller("User:admin")) is None


@pytest.mark.parametrize("version", [3, 9])
def test_a_produce_to_a_denied_topic_never_leaves_and_gets_its_error(version: int) -> None:
    body = local(check(produce(version, "secret"), 0, version, caller()), 0, version)
    [topic] = body.responses
    assert topic.name == "secret"
    assert [(int(p.index), int(p.error_code)) for p in topic.partition_responses] == [
        (0, 29),
        (2, 29),
    ]
    # acks=0: the client waits for no reply, so none is made (and nothing goes upstream)
    assert check(produce(version, "secret", acks=0), 0, version, caller()) == Verdict(None)


@pytest.mark.parametrize("version", [3, 9])
def test_a_mixed_produce_relays_the_allowed_topics_and_joins_the_denied_answers(
    version: int,
) -> None:
    verdict = check(produce(version, "orders", "secret"), 0, version, caller())
    assert verdict is not None and verdict.edit is not None
    sent = relayed_body(verdict, 0, version)
    assert [t.name for t in sent.topic_data] == ["orders"]
    assert sent.topic_data[0].partition_data[0].records == b"batch-orders"
    upstream = reply_of(
        0,
        version,
        responses=[
            {
                "name": "orders",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": 100, "log_append_time": None}
                ],
            }
        ],
    )
    _, _, body = rewrite.decode(upstream, 0, version)
    joined = verdict.edit(body)
    assert [
        (t.name, [int(p.error_code) for p in t.partition_responses]) for t in joined.responses
    ] == [("orders", [0]), ("secret", [29, 29])]


def test_a_transactional_produce_needs_its_transactional_id() -> None:
    assert check(produce(9, "orders", transactional_id="tx-alice"), 0, 9, caller()) is None
    body = local(check(produce(9, "orders", transactional_id="tx-bob"), 0, 9, caller()), 0, 9)
    assert {int(p.error_code) for t in body.responses for p in t.partition_responses} == {53}


def fetch(version: int, *topics: str | uuid.UUID, session_id: int = 0) -> bytes:
    key = "topic_id" if version >= 13 else "topic"
    return frame(
        1,
        version,
        replica_id=-1,
        max_wait=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=0 if session_id else -1,
        topics=[
            {
                key: t,
                "partitions": [
                    {
                        "partition": 1,
                        "current_leader_epoch": -1,
                        "fetch_offset": 5,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
            for t in topics
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def test_a_fetch_by_name_or_by_topic_id_is_checked_for_read() -> None:
    assert check(fetch(12, "orders"), 1, 12, caller()) is None
    assert check(fetch(13, ORDERS_ID), 1, 13, caller()) is None
    body = local(check(fetch(12, "secret"), 1, 12, caller()), 1, 12)
    assert [(t.topic, int(t.partitions[0].error_code)) for t in body.responses] == [("secret", 29)]
    assert body.responses[0].partitions[0].records == b""  # empty, as Kafka: not null
    body = local(check(fetch(15, SECRET_ID), 1, 15, caller()), 1, 15)
    assert [(t.topic_id, int(t.partitions[0].error_code)) for t in body.responses] == [
        (SECRET_ID, 29)
    ]
    # an id the upstream's Metadata never named cannot be checked: Kafka's UNKNOWN_TOPIC_ID
    body = local(check(fetch(13, uuid.UUID(int=99)), 1, 13, caller()), 1, 13)
    assert int(body.responses[0].partitions[0].error_code) == 100


def test_an_incremental_fetch_goes_upstream_even_when_emptied() -> None:
    verdict = check(fetch(12, "secret", session_id=77), 1, 12, caller())
    assert verdict is not None and verdict.edit is not None
    assert relayed_body(verdict, 1, 12).topics == ()
    _, _, body = rewrite.decode(reply_of(1, 12, session_id=77, responses=[]), 1, 12)
    assert [t.topic for t in verdict.edit(body).responses] == ["secret"]


def metadata(version: int, topics: list[str] | None, auto_create: bool = False) -> bytes:
    return frame(
        3,
        version,
        topics=None if topics is None else [{"name": t} for t in topics],
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=True,
    )


def metadata_reply(version: int, *topics: tuple[str, int]) -> Any:
    upstream = reply_of(
        3,
        version,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            {
                "name": name,
                "error_code": code,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": -2147483648,
            }
            for name, code in topics
        ],
    )
    return rewrite.decode(upstream, 3, version)[2]


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_lists_only_what_the_principal_may_describe(version: int) -> None:
    verdict = check(metadata(version, None), 3, version, caller())
    assert verdict is not None and verdict.edit is not None and verdict.frame is not None
    body = verdict.edit(
        metadata_reply(version, ("orders", 0), ("secret", 0), ("public-x", 0), ("payroll", 0))
    )
    assert [t.name for t in body.topics] == ["orders", "public-x"]
    if version >= 8:  # its own rights, not the gateway principal's
        ops = int(body.topics[0].topic_authorized_operations)
        assert ops & (1 << Op.WRITE) and not ops & (1 << Op.DELETE)


def test_metadata_for_named_topics_strips_the_denied_and_creates_nothing_unallowed() -> None:
    verdict = check(
        metadata(12, ["orders", "payroll", "public-new"], auto_create=True), 3, 12, caller()
    )
    assert verdict is not None and verdict.edit is not None
    sent = relayed_body(verdict, 3, 12)
    assert [t.name for t in sent.topics] == ["orders", "public-new"]
    assert sent.allow_auto_topic_creation is False  # alice may not CREATE
    body = verdict.edit(metadata_reply(12, ("orders", 0), ("public-new", 3)))
    assert [(t.name, int(t.error_code)) for t in body.topics] == [
        ("orders", 0),
        ("public-new", 29),
        ("payroll", 29),
    ]


def test_transactions_and_idempotence_need_what_kafka_checks() -> None:
    init = frame(
        22, 5, transactional_id=None, transaction_timeout=1000, producer_id=-1, producer_epoch=-1
    )
    assert check(init, 22, 5, caller()) is None  # WRITE on a topic: idempotence allowed
    assert int(local(check(init, 22, 5, caller("User:bob")), 22, 5).error_code) == 31
    txn = frame(
        22,
        5,
        transactional_id="tx-bob",
        transaction_timeout=1000,
        producer_id=-1,
        producer_epoch=-1,
    )
    assert int(local(check(txn, 22, 5, caller()), 22, 5).error_code) == 53
    end = frame(26, 4, transactional_id="tx-bob", producer_id=1, producer_epoch=0, committed=True)
    assert int(local(check(end, 26, 4, caller()), 26, 4).error_code) == 53
    add = frame(
        24,
        3,
        v3_and_below_transactional_id="tx-alice",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[
            {"name": "orders", "partitions": [0]},
            {"name": "secret", "partitions": [1]},
        ],
    )
    body = local(check(add, 24, 3, caller()), 24, 3)  # Kafka adds none when one is denied
    assert sorted(
        (t.name, int(t.results_by_partition[0].partition_error_code))
        for t in body.results_by_topic_v3_and_below
    ) == [("orders", 55), ("secret", 29)]
    find = frame(10, 4, key_type=1, coordinator_keys=["tx-alice", "tx-bob"])
    verdict = check(find, 10, 4, caller())
    assert verdict is not None and relayed_body(verdict, 10, 4).coordinator_keys == ("tx-alice",)


def test_topic_and_config_admin_apis_answer_each_denied_resource() -> None:
    create = frame(
        19,
        7,
        topics=[
            {
                "name": "new-1",
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        timeout=1000,
        validate_only=False,
    )
    body = local(check(create, 19, 7, caller()), 19, 7)
    assert [(t.name, int(t.error_code)) for t in body.topics] == [("new-1", 29)]
    assert check(create, 19, 7, caller("User:admin")) is None
    delete = frame(20, 5, topic_names=["orders"], timeout=1000)
    assert int(local(check(delete, 20, 5, caller()), 20, 5).responses[0].error_code) == 29
    configs = frame(
        32,
        4,
        resources=[
            {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    body = local(check(configs, 32, 4, caller()), 32, 4)
    assert sorted((int(r.resource_type), int(r.error_code)) for r in body.results) == [
        (2, 29),
        (4, 31),
    ]


def test_with_acls_only_checked_apis_are_advertised() -> None:
    from app.gateway.routes import advertised

    upstream = {0: (3, 11), 1: (4, 17), 3: (0, 13), 24: (0, 5), 57: (0, 1), 43: (0, 2)}
    ranges = advertised({}, upstream, authorize.AUTHORIZED, authorize.CAPS)
    assert ranges == {0: (3, 9), 1: (4, 15), 3: (0, 13), 24: (0, 3)}
    assert 57 in advertised({}, upstream)  # UpdateFeatures: relayed only without our ACLs


def test_authorize_any_follows_kafkas_deny_coverage() -> None:
    a = Authorizer(
        [acl(TOPIC, "orders", Op.WRITE), acl(TOPIC, "ord", Op.WRITE, DENY, PatternType.PREFIXED)]
    )
    assert not a.authorize_any("User:alice", "h", Op.WRITE, TOPIC)
    b = Authorizer([acl(TOPIC, "orders", Op.WRITE), acl(TOPIC, "other", Op.WRITE, DENY)])
    assert b.authorize_any("User:alice", "h", Op.WRITE, TOPIC)
    assert not b.authorize_any("User:bob", "h", Op.WRITE, TOPIC)


def test_metadata_v0_with_every_named_topic_denied_lists_none_of_the_others() -> None:
    """In v0 an empty topic list means every topic: the request emptied of its denied topics
    must not reveal the rest."""
    verdict = check(metadata(0, ["payroll"]), 3, 0, caller())
    assert verdict is not None and verdict.edit is not None
    assert relayed_body(verdict, 3, 0).topics == ()
    body = verdict.edit(metadata_reply(0, ("orders", 0), ("payroll", 0), ("public-x", 0)))
    assert [(t.name, int(t.error_code)) for t in body.topics] == [("payroll", 29)]
    every = check(metadata(0, []), 3, 0, caller())
    assert every is not None and every.edit is not None
    body = every.edit(metadata_reply(0, ("orders", 0), ("payroll", 0), ("public-x", 0)))
    assert [t.name for t in body.topics] == ["orders", "public-x"]


def test_list_offsets_and_offset_for_leader_epoch_need_describe() -> None:
    def list_offsets(topic: str) -> bytes:
        return frame(
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        )

    def epochs(topic: str) -> bytes:
        return frame(
            23,
            4,
            replica_id=-1,
            topics=[
                {
                    "topic": topic,
                    "partitions": [{"partition": 1, "current_leader_epoch": -1, "leader_epoch": 0}],
                }
            ],
        )

    assert check(list_offsets("public-x"), 2, 7, caller()) is None  # DESCRIBE by prefix
    assert check(epochs("orders"), 23, 4, caller()) is None  # WRITE implies DESCRIBE
    body = local(check(list_offsets("payroll"), 2, 7, caller()), 2, 7)
    assert [(t.name, int(t.partitions[0].error_code)) for t in body.topics] == [("payroll", 29)]
    body = local(check(epochs("payroll"), 23, 4, caller()), 23, 4)
    assert [
        (t.topic, int(t.partitions[0].partition), int(t.partitions[0].error_code))
        for t in body.topics
    ] == [("payroll", 1, 29)]
