"""DescribeAcls, CreateAcls, DeleteAcls, DescribeUserScramCredentials and
AlterUserScramCredentials (app/kafka/security_apis.py) as Kafka answers them.

The handlers run against a real event log on SQLite and a real SecurityManager (super user
User:admin; User:bob is nobody), called with hand-built request contexts; every reply is also
encoded, so it is valid on the wire. Then real admin clients (confluent-kafka, kafka-python)
over the wire: an in-process node whose listener carries the manager, and a `coordinator serve`
process started with COORD_AUTHORIZER=acl.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from app.group.messages import Error
from app.kafka.apis import version_table
from app.kafka.codec import build, encode_body, request_class
from app.kafka.context import RequestContext
from app.kafka.security_apis import (
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    create_acls_error,
    delete_acls_error,
    describe_acls_error,
)
from app.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from app.security.manager import SecurityManager
from app.security.sasl import verify_password
from storage.log import EventLog
from storage.migrate import upgrade_async
from tests.protocol.secure_node import secure_node
from tests.support.nodes import CoordinatorProcess

ADMIN = "User:admin"
BOB = "User:bob"
SHA256, SHA512 = 1, 2  # ScramMechanism wire codes
RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, AclPermissionType

# --- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
async def event_log(tmp_path: Path) -> AsyncIterator[EventLog]:
    url = f"sqlite+aiosqlite:///{tmp_path}/security.db"
    await upgrade_async(url)
    log = await EventLog.open(url)
    try:
        yield log
    finally:
        await log.close()


async def _manager(event_log: EventLog, authorizer: str = "acl") -> SecurityManager:
    m = SecurityManager(event_log, authorizer=authorizer, super_users=ADMIN)
    await m.refresh(force=True)
    return m


@pytest.fixture
async def security(event_log: EventLog) -> AsyncIterator[SecurityManager]:
    m = await _manager(event_log)
    try:
        yield m
    finally:
        await m.stop()


async def call(
    api_key: int,
    version: int,
    security: SecurityManager | None,
    principal: str = ADMIN,
    **fields: Any,
) -> Any:
    """The handler of the advertised table, as the server calls it; the reply is encoded too."""
    entry = version_table()[(api_key, version)]
    request = build(request_class(api_key, version), **fields)
    ctx = RequestContext(
        service=cast(Any, None),  # these handlers never touch the group service
        api_version=version,
        client_id="security-test",
        client_host="/10.0.0.7",
        principal=principal,
        client_ip="10.0.0.7",
        security=security,
    )
    result = entry.api.handler(ctx, request)
    if asyncio.iscoroutine(result):
        result = await result
    encode_body(result)
    return result


def creation(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = AclPermissionType.ALLOW,
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> dict[str, Any]:
    return {
        "resource_type": int(rtype),
        "resource_name": name,
        "resource_pattern_type": int(pattern),
        "principal": principal,
        "host": host,
        "operation": int(op),
        "permission_type": int(perm),
    }


def acl_filter(
    rtype: ResourceType = ResourceType.ANY,
    name: str | None = None,
    pattern: PatternType = PatternType.ANY,
    principal: str | None = None,
    host: str | None = None,
    op: AclOperation = AclOperation.ANY,
    perm: AclPermissionType = AclPermissionType.ANY,
) -> dict[str, Any]:
    return {
        "resource_type_filter": int(rtype),
        "resource_name_filter": name,
        "pattern_type_filter": int(pattern),
        "principal_filter": principal,
        "host_filter": host,
        "operation": int(op),
        "permission_type": int(perm),
    }


def binding(c: dict[str, Any]) -> AclBinding:
    return AclBinding(
        RT(c["resource_type"]),
        c["resource_name"],
        PT(c["resource_pattern_type"]),
        c["principal"],
        c["host"],
        OP(c["operation"]),
        PERM(c["permission_type"]),
    )


async def create(security: SecurityManager | None, *creations: dict[str, Any], **kw: Any) -> Any:
    version = kw.pop("version", 3)
    return await call(CREATE_ACLS, version, security, creations=list(creations), **kw)


async def describe_acls(security: SecurityManager | None, version: int = 3, **kw: Any) -> Any:
    principal = kw.pop("as_principal", ADMIN)
    return await call(DESCRIBE_ACLS, version, security, principal, **acl_filter(**kw))


async def delete(security: SecurityManager | None, *filters: dict[str, Any], **kw: Any) -> Any:
    version = kw.pop("version", 3)
    return await call(DELETE_ACLS, version, security, filters=list(filters), **kw)


def codes(results: Any) -> list[int]:
    return [int(r.error_code) for r in results]


def salted(password: str, salt: bytes, iterations: int, mechanism: int = SHA256) -> bytes:
    name = "sha256" if mechanism == SHA256 else "sha512"
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


def upsertion(
    name: str,
    mechanism: int = SHA256,
    iterations: int = 4096,
    password: str = "secret",
    salt: bytes = b"0123456789abcdef",
) -> dict[str, Any]:
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted(password, salt, iterations, mechanism) if salt else b"",
    }


async def alter(
    security: SecurityManager | None,
    upsertions: list[dict[str, Any]] = [],  # noqa: B006 - never mutated
    deletions: list[dict[str, Any]] = [],  # noqa: B006
    principal: str = ADMIN,
) -> dict[str, tuple[int, str | None]]:
    reply = await call(
        ALTER_USER_SCRAM_CREDENTIALS,
        0,
        security,
        principal,
        upsertions=upsertions,
        deletions=deletions,
    )
    out = {r.user: (int(r.error_code), r.error_message) for r in reply.results}
    assert len(out) == len(reply.results), "one result per user"
    return out


async def describe_scram(
    security: SecurityManager | None, users: list[str] | None, principal: str = ADMIN
) -> Any:
    named = None if users is None else [{"name": u} for u in users]
    return await call(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, security, principal, users=named)


def infos(result: Any) -> list[tuple[int, int]]:
    return [(int(i.mechanism), int(i.iterations)) for i in result.credential_infos]


def audit_of(caplog: pytest.LogCaptureFixture, action: str) -> list[dict[str, Any]]:
    return [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "coordinator.audit" and json.loads(r.getMessage())["action"] == action
    ]


GROUP_READ = creation(RT.GROUP, "billing", BOB, OP.READ)
GROUP_DENY = creation(
    RT.GROUP, "billing", "User:eve", OP.READ, AclPermissionType.DENY, host="10.0.0.9"
)
TOPIC_PREFIX = creation(RT.TOPIC, "orders-", BOB, OP.READ, pattern=PT.PREFIXED)


# --- CreateAcls / DescribeAcls / DeleteAcls ---------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_create_describe_delete_round_trip(
    security: SecurityManager, event_log: EventLog, version: int
) -> None:
    assert not security.authorize(BOB, "10.0.0.7", OP.READ, RT.GROUP, "billing")

    reply = await create(security, GROUP_READ, GROUP_DENY, TOPIC_PREFIX, version=version)
    assert codes(reply.results) == [0, 0, 0]
    assert [r.error_message for r in reply.results] == [None, None, None]
    wanted = {binding(GROUP_READ), binding(GROUP_DENY), binding(TOPIC_PREFIX)}
    assert set(await event_log.acl_bindings()) == wanted
    # this node's snapshot was reloaded before the reply: the ACLs are in force at once
    assert security.authorize(BOB, "10.0.0.7", OP.READ, RT.GROUP, "billing")
    assert security.authorize(BOB, "10.0.0.7", OP.DESCRIBE, RT.TOPIC, "orders-eu")

    # every binding, grouped by resource pattern as Kafka's DescribeAclsResponse
    described = await describe_acls(security, version)
    assert (described.error_code, described.error_message) == (ErrorCode.none, None)
    by_resource = {
        (r.resource_type, r.resource_name, r.pattern_type): {
            (a.principal, a.host, a.operation, a.permission_type) for a in r.acls
        }
        for r in described.resources
    }
    assert by_resource == {
        (RT.GROUP, "billing", PT.LITERAL): {
            (BOB, "*", OP.READ, PERM.ALLOW),
            ("User:eve", "10.0.0.9", OP.READ, PERM.DENY),
        },
        (RT.TOPIC, "orders-", PT.PREFIXED): {(BOB, "*", OP.READ, PERM.ALLOW)},
    }
    assert len(described.resources) == 2

    # filters: by principal; by permission; MATCH finds the prefix binding for a topic name
    bobs = await describe_acls(security, version, principal=BOB)
    assert sum(len(r.acls) for r in bobs.resources) == 2
    denies = await describe_acls(security, version, perm=PERM.DENY)
    assert [(r.resource_name, len(r.acls)) for r in denies.resources] == [("billing", 1)]
    matched = await describe_acls(
        security, version, rtype=RT.TOPIC, name="orders-eu", pattern=PT.MATCH
    )
    assert [(r.resource_name, r.pattern_type) for r in matched.resources] == [
        ("orders-", PT.PREFIXED)
    ]
    none = await describe_acls(security, version, rtype=RT.TOPIC, name="orders-eu")
    assert (none.error_code, list(none.resources)) == (ErrorCode.none, [])

    # delete: one filter matching two bindings, one matching nothing
    reply = await delete(
        security,
        acl_filter(rtype=RT.GROUP, name="billing", pattern=PT.LITERAL),
        acl_filter(principal="User:nobody"),
        version=version,
    )
    first, second = reply.filter_results
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
    assert {
        (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.operation)
        for m in first.matching_acls
    } == {
        (RT.GROUP, "billing", PT.LITERAL, BOB, OP.READ),
        (RT.GROUP, "billing", PT.LITERAL, "User:eve", OP.READ),
    }
    assert codes(first.matching_acls) == [0, 0]
    assert list(second.matching_acls) == []
    assert await event_log.acl_bindings() == [binding(TOPIC_PREFIX)]
    assert not security.authorize(BOB, "10.0.0.7", OP.READ, RT.GROUP, "billing")


async def test_acl_apis_need_cluster_describe_and_alter(
    security: SecurityManager, event_log: EventLog
) -> None:
    await create(security, GROUP_READ)

    denied = await describe_acls(security, as_principal=BOB)
    assert int(denied.error_code) == ErrorCode.cluster_authorization_failed
    assert denied.error_message and list(denied.resources) == []

    reply = await create(security, TOPIC_PREFIX, GROUP_DENY, principal=BOB)
    assert codes(reply.results) == [ErrorCode.cluster_authorization_failed] * 2
    reply = await delete(security, acl_filter(), principal=BOB)
    (result,) = reply.filter_results
    assert int(result.error_code) == ErrorCode.cluster_authorization_failed
    assert list(result.matching_acls) == []
    assert await event_log.acl_bindings() == [binding(GROUP_READ)]  # nothing changed

    # CLUSTER DESCRIBE lets bob list the ACLs, not change them
    cluster_describe = creation(RT.CLUSTER, CLUSTER_NAME, BOB, OP.DESCRIBE)
    assert codes((await create(security, cluster_describe)).results) == [0]
    assert int((await describe_acls(security, as_principal=BOB)).error_code) == 0
    reply = await create(security, TOPIC_PREFIX, principal=BOB)
    assert codes(reply.results) == [ErrorCode.cluster_authorization_failed]

    # CLUSTER ALTER: bob administers ACLs (ALTER implies DESCRIBE, as in Kafka)
    cluster_alter = creation(RT.CLUSTER, CLUSTER_NAME, BOB, OP.ALTER)
    assert codes((await create(security, cluster_alter)).results) == [0]
    assert codes((await create(security, TOPIC_PREFIX, principal=BOB)).results) == [0]
    reply = await delete(security, acl_filter(rtype=RT.TOPIC), principal=BOB)
    assert [len(r.matching_acls) for r in reply.filter_results] == [1]


async def test_without_an_authorizer_acl_apis_answer_security_disabled(
    event_log: EventLog,
) -> None:
    no_authorizer = await _manager(event_log, authorizer="none")
    try:
        for security in (None, no_authorizer):
            described = await describe_acls(security)
            assert int(described.error_code) == ErrorCode.security_disabled
            assert described.error_message == "No Authorizer is configured on the broker"
            reply = await create(security, GROUP_READ, TOPIC_PREFIX)
            assert codes(reply.results) == [ErrorCode.security_disabled] * 2
            reply = await delete(security, acl_filter(), acl_filter(rtype=RT.GROUP))
            assert codes(reply.filter_results) == [ErrorCode.security_disabled] * 2
        assert await event_log.acl_bindings() == []
    finally:
        await no_authorizer.stop()


async def test_invalid_bindings_are_refused_one_by_one(
    security: SecurityManager, event_log: EventLog
) -> None:
    invalid = [
        creation(RT.CLUSTER, "my-cluster", BOB, OP.ALTER),  # the CLUSTER is kafka-cluster
        creation(RT.GROUP, "", BOB, OP.READ),  # empty resource name
        creation(RT.GROUP, "g", BOB, OP.ANY),  # ANY is a filter value, not an operation
        creation(RT.GROUP, "g", BOB, OP.READ, pattern=PT.MATCH),
        creation(RT.ANY, "g", BOB, OP.READ),
        creation(RT.GROUP, "g", BOB, OP.READ, perm=PERM.ANY),
        creation(RT.GROUP, "g", "bob", OP.READ),  # not Type:name
        creation(RT.GROUP, "g", BOB, OP.WRITE),  # groups have no WRITE
        {**creation(RT.GROUP, "g", BOB, OP.READ), "resource_type": 99},  # unknown code
        {**creation(RT.GROUP, "g", BOB, OP.READ), "operation": 77},
    ]
    reply = await create(security, GROUP_READ, *invalid, TOPIC_PREFIX)
    assert codes(reply.results) == [0] + [ErrorCode.invalid_request] * len(invalid) + [0]
    assert all(r.error_message for r in reply.results[1:-1])
    assert "kafka-cluster" in reply.results[1].error_message
    assert set(await event_log.acl_bindings()) == {binding(GROUP_READ), binding(TOPIC_PREFIX)}


async def test_invalid_filters_are_refused(security: SecurityManager, event_log: EventLog) -> None:
    await create(security, GROUP_READ, TOPIC_PREFIX)
    bad = acl_filter(op=AclOperation.UNKNOWN)
    described = await call(DESCRIBE_ACLS, 3, security, **bad)
    assert int(described.error_code) == ErrorCode.invalid_request
    assert described.error_message
    reply = await delete(security, bad, acl_filter(rtype=RT.TOPIC), acl_filter(pattern=PT.UNKNOWN))
    assert codes(reply.filter_results) == [ErrorCode.invalid_request, 0, ErrorCode.invalid_request]
    assert reply.filter_results[0].error_message
    assert [len(r.matching_acls) for r in reply.filter_results] == [0, 1, 0]
    assert await event_log.acl_bindings() == [binding(GROUP_READ)]


async def test_creating_a_stored_binding_again_succeeds_and_stores_one(
    security: SecurityManager, event_log: EventLog
) -> None:
    reply = await create(security, GROUP_READ, GROUP_READ)
    assert codes(reply.results) == [0, 0]
    assert codes((await create(security, GROUP_READ)).results) == [0]
    assert await event_log.acl_bindings() == [binding(GROUP_READ)]


async def test_a_binding_two_delete_filters_match_is_in_both_results(
    security: SecurityManager, event_log: EventLog
) -> None:
    await create(security, GROUP_READ)
    reply = await delete(security, acl_filter(principal=BOB), acl_filter(rtype=RT.GROUP))
    assert [len(r.matching_acls) for r in reply.filter_results] == [1, 1]
    assert await event_log.acl_bindings() == []


async def test_acl_changes_are_audited(
    security: SecurityManager, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="coordinator.audit"):
        await create(security, GROUP_READ, creation(RT.GROUP, "", BOB, OP.READ))
        await delete(security, acl_filter(rtype=RT.GROUP))
        await create(security, TOPIC_PREFIX, principal=BOB)  # denied
    created = audit_of(caplog, "CreateAcls")
    assert [(line["outcome"], line["resource"]) for line in created] == [
        ("failure", "GROUP:LITERAL:"),
        ("success", "GROUP:LITERAL:billing"),
    ]
    ok = created[1]
    assert (ok["principal"], ok["source"], ok["acl_principal"]) == (ADMIN, "10.0.0.7", BOB)
    assert (ok["operation"], ok["permission"], ok["acl_host"]) == ("READ", "ALLOW", "*")
    deleted = audit_of(caplog, "DeleteAcls")
    assert [(d["outcome"], d["resource"]) for d in deleted] == [
        ("success", "GROUP:LITERAL:billing")
    ]
    # bob's refusal is the authorizer's denial line (ALTER on the cluster)
    denial = audit_of(caplog, "ALTER")
    assert [(d["principal"], d["outcome"], d["resource"]) for d in denial] == [
        (BOB, "denied", f"CLUSTER:{CLUSTER_NAME}")
    ]


async def test_another_node_sees_a_new_acl_within_a_second(
    security: SecurityManager, event_log: EventLog
) -> None:
    other = await _manager(event_log)
    await other.start()  # polls the change counter
    try:
        assert not other.authorize(BOB, "10.0.0.7", OP.READ, RT.GROUP, "billing")
        await create(security, GROUP_READ)
        for _ in range(20):
            if other.authorize(BOB, "10.0.0.7", OP.READ, RT.GROUP, "billing", log_denial=False):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the other node did not see the ACL within a second")
    finally:
        await other.stop()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_error_replies_keep_the_request_shape(version: int) -> None:
    """What the server answers when a handler raised (the database is away)."""
    ctx = RequestContext(service=cast(Any, None), api_version=version, client_id="", client_host="")
    err = Error.UNKNOWN_SERVER_ERROR
    creations = build(request_class(CREATE_ACLS, version), creations=[GROUP_READ, TOPIC_PREFIX])
    reply = create_acls_error(ctx, creations, err)
    assert codes(reply.results) == [-1, -1]
    filters = build(request_class(DELETE_ACLS, version), filters=[acl_filter()])
    assert codes(delete_acls_error(ctx, filters, err).filter_results) == [-1]
    described = describe_acls_error(ctx, build(request_class(DESCRIBE_ACLS, version)), err)
    assert int(described.error_code) == -1
    for r in (reply, described):
        encode_body(r)


# --- DescribeUserScramCredentials / AlterUserScramCredentials --------------------------------


async def test_upsert_describe_and_delete_credentials(
    security: SecurityManager, event_log: EventLog
) -> None:
    done = await alter(
        security,
        upsertions=[
            upsertion("alice", SHA256, 8192, "alice-pw"),
            upsertion("bob", SHA512, 4096, "bob-pw"),
        ],
    )
    assert done == {"alice": (0, None), "bob": (0, None)}
    stored = {(c.user, c.mechanism): c for c in await event_log.scram_credentials()}
    assert set(stored) == {("alice", "SCRAM-SHA-256"), ("bob", "SCRAM-SHA-512")}
    alice = stored[("alice", "SCRAM-SHA-256")]
    assert alice.iterations == 8192
    # the stored keys are the ones a SCRAM login with the password derives (RFC 5802)
    assert verify_password(alice, "alice-pw") and not verify_password(alice, "wrong")
    assert verify_password(stored[("bob", "SCRAM-SHA-512")], "bob-pw")
    # this node authenticates with them at once
    assert security.credential("alice", "SCRAM-SHA-256") == alice

    # a second mechanism for alice; then all users, null and empty alike
    assert await alter(security, upsertions=[upsertion("alice", SHA512, 4096)]) == {
        "alice": (0, None)
    }
    everyone: list[list[str] | None] = [None, []]
    for users in everyone:
        reply = await describe_scram(security, users)
        assert (reply.error_code, reply.error_message) == (ErrorCode.none, None)
        assert {r.user: (int(r.error_code), infos(r)) for r in reply.results} == {
            "alice": (0, [(SHA256, 8192), (SHA512, 4096)]),
            "bob": (0, [(SHA512, 4096)]),
        }

    # delete one of alice's: the other stays
    done = await alter(security, deletions=[{"name": "alice", "mechanism": SHA256}])
    assert done == {"alice": (0, None)}
    (result,) = (await describe_scram(security, ["alice"])).results
    assert (result.user, int(result.error_code), infos(result)) == ("alice", 0, [(SHA512, 4096)])
    assert security.credential("alice", "SCRAM-SHA-256") is None


async def test_describe_named_users(security: SecurityManager) -> None:
    await alter(security, upsertions=[upsertion("alice")])
    reply = await describe_scram(security, ["alice", "ghost", "twice", "twice"])
    assert reply.error_code == ErrorCode.none
    results = {r.user: r for r in reply.results}
    assert len(reply.results) == 3  # one result per user
    assert (int(results["alice"].error_code), infos(results["alice"])) == (0, [(SHA256, 4096)])
    ghost, twice = results["ghost"], results["twice"]
    assert int(ghost.error_code) == ErrorCode.resource_not_found
    assert ghost.error_message == "Attempt to describe a user credential that does not exist: ghost"
    assert int(twice.error_code) == ErrorCode.duplicate_resource
    assert twice.error_message == (
        "Cannot describe SCRAM credentials for the same user twice in a single request: twice"
    )
    assert list(ghost.credential_infos) == []


async def test_alter_validates_as_kafka(security: SecurityManager, event_log: EventLog) -> None:
    await alter(security, upsertions=[upsertion("keep", SHA512), upsertion("both")])
    done = await alter(
        security,
        upsertions=[
            upsertion("ok", SHA256, 16384),
            {**upsertion("mech"), "mechanism": 0},
            {**upsertion("mech9"), "mechanism": 9},
            upsertion("few", iterations=4095),
            upsertion("many", iterations=16385),
            upsertion(""),
            upsertion("twice"),
            upsertion("twice", SHA512),
            upsertion("both"),
            upsertion("nosalt", salt=b""),
        ],
        deletions=[
            {"name": "both", "mechanism": SHA256},
            {"name": "ghost", "mechanism": SHA256},
            {"name": "keep", "mechanism": SHA256},  # keep has SHA-512 only
            {"name": "mechdel", "mechanism": 3},
        ],
    )
    assert {user: code for user, (code, _) in done.items()} == {
        "ok": 0,
        "mech": ErrorCode.unsupported_sasl_mechanism,
        "mech9": ErrorCode.unsupported_sasl_mechanism,
        "few": ErrorCode.unacceptable_credential,
        "many": ErrorCode.unacceptable_credential,
        "": ErrorCode.unacceptable_credential,
        "twice": ErrorCode.duplicate_resource,
        "both": ErrorCode.duplicate_resource,
        "nosalt": ErrorCode.unacceptable_credential,
        "ghost": ErrorCode.resource_not_found,
        "keep": ErrorCode.resource_not_found,
        "mechdel": ErrorCode.unsupported_sasl_mechanism,
    }
    assert all(message for user, (code, message) in done.items() if code)
    assert done["few"][1] is not None and "Too few iterations" in done["few"][1]
    assert done["many"][1] is not None and "Too many iterations" in done["many"][1]
    assert done[""][1] == "Username must not be empty"
    assert done["twice"][1] == "A user credential cannot be altered twice in the same request"
    assert done["ghost"][1] == "Attempt to delete a user credential that does not exist"
    assert {(c.user, c.mechanism) for c in await event_log.scram_credentials()} == {
        ("both", "SCRAM-SHA-256"),  # a user altered twice is not altered at all
        ("keep", "SCRAM-SHA-512"),
        ("ok", "SCRAM-SHA-256"),
    }


async def test_scram_apis_need_cluster_describe_and_alter(
    security: SecurityManager, event_log: EventLog
) -> None:
    await alter(security, upsertions=[upsertion("alice")])
    reply = await describe_scram(security, ["alice", "carol"], principal=BOB)
    assert int(reply.error_code) == ErrorCode.cluster_authorization_failed
    assert reply.error_message
    assert codes(reply.results) == [ErrorCode.cluster_authorization_failed] * 2
    assert [infos(r) for r in reply.results] == [[], []]

    done = await alter(
        security,
        upsertions=[upsertion("zed"), upsertion("carol")],
        deletions=[{"name": "alice", "mechanism": SHA256}],
        principal=BOB,
    )
    assert list(done) == ["alice", "carol", "zed"]  # sorted, as Kafka's error response
    assert {code for code, _ in done.values()} == {ErrorCode.cluster_authorization_failed}
    assert [c.user for c in await event_log.scram_credentials()] == ["alice"]

    # a super user grants bob CLUSTER ALTER
    await create(security, creation(RT.CLUSTER, CLUSTER_NAME, BOB, OP.ALTER))
    assert await alter(security, upsertions=[upsertion("carol")], principal=BOB) == {
        "carol": (0, None)
    }
    assert codes((await describe_scram(security, None, principal=BOB)).results) == [0, 0]


async def test_scram_apis_work_without_an_authorizer(event_log: EventLog) -> None:
    """As in Kafka: credentials are managed whether or not ACLs are enforced."""
    open_manager = await _manager(event_log, authorizer="none")
    try:
        done = await alter(open_manager, upsertions=[upsertion("alice")], principal=BOB)
        assert done == {"alice": (0, None)}
        reply = await describe_scram(open_manager, None, principal=BOB)
        assert [(r.user, infos(r)) for r in reply.results] == [("alice", [(SHA256, 4096)])]
    finally:
        await open_manager.stop()
    # a listener without any security manager cannot reach the store
    reply = await describe_scram(None, ["alice"])
    assert int(reply.error_code) == ErrorCode.security_disabled
    assert await alter(None, upsertions=[upsertion("x")]) == {
        "x": (ErrorCode.security_disabled, "Security features are disabled.")
    }


async def test_credential_changes_are_audited_without_secrets(
    security: SecurityManager, caplog: pytest.LogCaptureFixture
) -> None:
    up = upsertion("alice", SHA512, 8192, "hunter2")
    with caplog.at_level(logging.INFO, logger="coordinator.audit"):
        await alter(security, upsertions=[up, upsertion("few", iterations=10)])
        await alter(security, deletions=[{"name": "alice", "mechanism": SHA512}])
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "coordinator.audit"]
    summary = [(x["action"], x["outcome"], x["resource"]) for x in lines]
    assert summary == [
        ("UpsertScramCredential", "success", "USER:alice"),
        ("AlterUserScramCredentials", "failure", "USER:few"),
        ("DeleteScramCredential", "success", "USER:alice"),
    ]
    assert lines[0]["mechanism"] == "SCRAM-SHA-512" and lines[0]["iterations"] == 8192
    assert lines[1]["error"] == "UNACCEPTABLE_CREDENTIAL"
    assert all((x["principal"], x["source"]) == (ADMIN, "10.0.0.7") for x in lines)
    text = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (up["salt"], up["salted_password"]):
        assert secret.hex() not in text and repr(secret) not in text
    assert "hunter2" not in text


# --- real admin clients over the wire ------------------------------------------------------------

# the clients' modules, untyped (confluent-kafka's stubs do not export these names)
CK: Any = importlib.import_module("confluent_kafka.admin")
KP: Any = importlib.import_module("kafka.admin")
CkError: Any = importlib.import_module("confluent_kafka").KafkaError
CkException: Any = importlib.import_module("confluent_kafka").KafkaException
TIMEOUT_S = 15.0


def _ck_binding(rtype: str, name: str, pattern: str, op: str) -> Any:
    return CK.AclBinding(
        CK.ResourceType[rtype],
        name,
        CK.ResourcePatternType[pattern],
        "User:bob",
        "*",
        CK.AclOperation[op],
        CK.AclPermissionType.ALLOW,
    )


def _ck_filter(rtype: str = "ANY") -> Any:
    return CK.AclBindingFilter(
        CK.ResourceType[rtype],
        None,
        CK.ResourcePatternType.ANY,
        None,
        None,
        CK.AclOperation.ANY,
        CK.AclPermissionType.ANY,
    )


def _ck_error(fn: Any) -> str:
    """The KafkaError name a blocking admin call failed with, or what it returned."""
    try:
        return f"accepted: {fn()!r}"
    except CkException as e:
        return str(e.args[0].name())


def _confluent_round_trip(bootstrap: str) -> dict[str, Any]:
    """Every ACL and SCRAM call of confluent-kafka's AdminClient, blocking (run in a thread)."""
    admin = CK.AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    t = TIMEOUT_S
    out: dict[str, Any] = {}
    group = _ck_binding("GROUP", "billing", "LITERAL", "READ")
    prefixed = _ck_binding("TOPIC", "orders-", "PREFIXED", "READ")
    for f in admin.create_acls([group, prefixed], request_timeout=t).values():
        f.result(t)
    bad = _ck_binding("BROKER", "not-the-cluster", "LITERAL", "ALTER")  # BROKER: wire CLUSTER
    out["bad"] = _ck_error(lambda: admin.create_acls([bad], request_timeout=t)[bad].result(t))
    found = admin.describe_acls(_ck_filter(), request_timeout=t).result(t)
    out["described"] = sorted((b.restype.name, b.name, b.resource_pattern_type.name) for b in found)
    groups = _ck_filter("GROUP")
    deleted = admin.delete_acls([groups], request_timeout=t)[groups].result(t)
    out["deleted"] = [(b.restype.name, b.name) for b in deleted]
    out["left"] = [b.name for b in admin.describe_acls(_ck_filter(), request_timeout=t).result(t)]

    info = CK.ScramCredentialInfo(CK.ScramMechanism.SCRAM_SHA_256, 8192)
    up = CK.UserScramCredentialUpsertion("alice", info, b"alice-password")
    for f in admin.alter_user_scram_credentials([up], request_timeout=t).values():
        f.result(t)
    desc = admin.describe_user_scram_credentials(["alice"], request_timeout=t)["alice"].result(t)
    out["alice"] = [(i.mechanism.name, i.iterations) for i in desc.scram_credential_infos]
    gone = CK.UserScramCredentialDeletion("alice", CK.ScramMechanism.SCRAM_SHA_256)
    for f in admin.alter_user_scram_credentials([gone], request_timeout=t).values():
        f.result(t)
    out["after_delete"] = _ck_error(
        lambda: admin.describe_user_scram_credentials(["alice"], request_timeout=t)["alice"].result(
            t
        )
    )
    return out


def _assert_confluent(out: dict[str, Any]) -> None:
    assert out["bad"] == "INVALID_REQUEST"
    assert out["described"] == [("GROUP", "billing", "LITERAL"), ("TOPIC", "orders-", "PREFIXED")]
    assert out["deleted"] == [("GROUP", "billing")]
    assert out["left"] == ["orders-"]
    assert out["alice"] == [("SCRAM_SHA_256", 8192)]
    assert out["after_delete"] == "RESOURCE_NOT_FOUND"


def _kp_acl(principal: str, op: str, name: str, pattern: str) -> Any:
    return KP.ACL(
        principal=principal,
        host="*",
        operation=KP.ACLOperation[op],
        permission_type=KP.ACLPermissionType.ALLOW,
        resource_pattern=KP.ResourcePattern(
            KP.ResourceType.GROUP, name, KP.ACLResourcePatternType[pattern]
        ),
    )


def _kp_every() -> Any:
    return KP.ACLFilter(
        principal=None,
        host=None,
        operation=KP.ACLOperation.ANY,
        permission_type=KP.ACLPermissionType.ANY,
        resource_pattern=KP.ResourcePatternFilter(
            KP.ResourceType.ANY, None, KP.ACLResourcePatternType.ANY
        ),
    )


def _kafka_python_round_trip(bootstrap: str) -> dict[str, Any]:
    admin = KP.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        out: dict[str, Any] = {}
        created = admin.create_acls([_kp_acl("User:carol", "DESCRIBE", "team-", "PREFIXED")])
        out["created"] = (len(created["succeeded"]), len(created["failed"]))
        acls, error = admin.describe_acls(_kp_every())
        out["described"] = sorted((a.principal, a.resource_pattern.resource_name) for a in acls)
        out["describe_error"] = error.__name__  # kafka-python answers error classes
        ((_, matched, error),) = admin.delete_acls([_kp_every()])
        out["deleted"] = sorted(a.principal for a in matched)
        out["delete_error"] = error.__name__

        sha256, sha512 = KP.ScramMechanism.SCRAM_SHA_256, KP.ScramMechanism.SCRAM_SHA_512
        out["altered"] = admin.alter_user_scram_credentials(
            [
                KP.UserScramCredentialUpsertion("dave", sha512, "pw", 4096),
                KP.UserScramCredentialUpsertion("weak", sha256, "pw", 1000),
            ]
        )
        out["scram"] = admin.describe_user_scram_credentials(["dave", "nobody"])
        return out
    finally:
        admin.close()


def _assert_kafka_python(out: dict[str, Any]) -> None:
    assert out["created"] == (1, 0)
    assert ("User:carol", "team-") in out["described"]
    assert out["describe_error"] == "NoError"
    assert "User:carol" in out["deleted"]
    assert out["delete_error"] == "NoError"
    assert out["altered"]["dave"] is None
    assert "Too few iterations" in out["altered"]["weak"]
    dave, nobody = out["scram"]["dave"], out["scram"]["nobody"]
    assert dave["error"] is None
    assert [(i["mechanism"].name, i["iterations"]) for i in dave["credential_infos"]] == [
        ("SCRAM_SHA_512", 4096)
    ]
    assert "does not exist" in nobody["error"]


async def test_admin_clients_against_a_node_with_the_acl_authorizer(tmp_path: Path) -> None:
    async with secure_node(tmp_path) as n:  # User:ANONYMOUS (PLAINTEXT) is a super user
        out = await asyncio.wait_for(asyncio.to_thread(_confluent_round_trip, n.bootstrap), 120)
        _assert_confluent(out)
        assert [b.resource_name for b in await n.log.acl_bindings()] == ["orders-"]
        out = await asyncio.wait_for(asyncio.to_thread(_kafka_python_round_trip, n.bootstrap), 120)
        _assert_kafka_python(out)
        assert await n.log.acl_bindings() == []


async def test_admin_clients_without_cluster_rights_are_refused(tmp_path: Path) -> None:
    async with secure_node(tmp_path, super_users="User:admin") as n:  # ANONYMOUS is nobody
        got = await asyncio.wait_for(asyncio.to_thread(_refused_confluent, n.bootstrap), 60)
        assert got == {
            "create_acls": "CLUSTER_AUTHORIZATION_FAILED",
            # librdkafka drops DescribeAcls' top-level error code (a known quirk): the
            # refusal reads as an empty listing, and nothing is disclosed
            "describe_acls": "accepted: []",
            "alter_scram": "CLUSTER_AUTHORIZATION_FAILED",
        }
        got = await asyncio.wait_for(asyncio.to_thread(_refused_kafka_python, n.bootstrap), 60)
        assert got == {
            "create_acls": "ClusterAuthorizationFailedError",
            "describe_acls": "ClusterAuthorizationFailedError",
            "describe_scram": "ClusterAuthorizationFailedError",
        }
        assert await n.log.acl_bindings() == []
        assert await n.log.scram_credentials() == []


def _refused_confluent(bootstrap: str) -> dict[str, str]:
    # Not describe_user_scram_credentials: librdkafka 2.16 frees memory twice on any reply
    # with a top-level error (Kafka's answer to a principal without CLUSTER DESCRIBE) and
    # takes the process down; kafka-python checks that refusal below.
    admin = CK.AdminClient({"bootstrap.servers": bootstrap})
    t = TIMEOUT_S
    acl = _ck_binding("GROUP", "g", "LITERAL", "READ")
    up = CK.UserScramCredentialUpsertion(
        "mallory", CK.ScramCredentialInfo(CK.ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    return {
        "create_acls": _ck_error(
            lambda: admin.create_acls([acl], request_timeout=t)[acl].result(t)
        ),
        "describe_acls": _ck_error(
            lambda: admin.describe_acls(_ck_filter(), request_timeout=t).result(t)
        ),
        "alter_scram": _ck_error(
            lambda: admin.alter_user_scram_credentials([up], request_timeout=t)["mallory"].result(t)
        ),
    }


def _refused_kafka_python(bootstrap: str) -> dict[str, str]:
    admin = KP.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    out: dict[str, str] = {}
    try:
        created = admin.create_acls([_kp_acl("User:bob", "READ", "g", "LITERAL")])
        (error,) = created["failed"]  # kafka-python lists the error classes
        out["create_acls"] = error.__name__
        calls: dict[str, Callable[[], Any]] = {
            "describe_acls": lambda: admin.describe_acls(_kp_every()),
            "describe_scram": lambda: admin.describe_user_scram_credentials(),
        }
        for name, fn in calls.items():
            try:
                fn()
                out[name] = "accepted"
            except Exception as e:
                out[name] = type(e).__name__
        return out
    finally:
        admin.close()


@pytest.mark.integration
async def test_admin_clients_against_a_coordinator_process(tmp_path: Path) -> None:
    """`coordinator serve` with COORD_AUTHORIZER=acl: over PLAINTEXT the principal is
    User:ANONYMOUS, made a super user."""
    url = f"sqlite+aiosqlite:///{tmp_path}/coordinator.db"
    env = {
        "COORD_AUTHORIZER": "acl",
        "COORD_SUPER_USERS": "User:ANONYMOUS",
        "COORD_TOPICS": "t1:3",
    }
    proc = CoordinatorProcess(url, tmp_path, env)
    await asyncio.to_thread(proc.start)
    try:
        out = await asyncio.wait_for(asyncio.to_thread(_confluent_round_trip, proc.bootstrap), 120)
        _assert_confluent(out)
        out = await asyncio.wait_for(
            asyncio.to_thread(_kafka_python_round_trip, proc.bootstrap), 120
        )
        _assert_kafka_python(out)
    except BaseException:
        print(proc.logs(), file=sys.stderr)
        raise
    finally:
        await asyncio.to_thread(proc.stop)
