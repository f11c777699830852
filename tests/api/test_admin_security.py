"""The admin API's security: the bearer token, HTTP Basic with SCRAM users authorized by the
Kafka port's ACLs, JSON-only mutations, CORS only when configured, the audit trail, /acls and
/users, and redirects only to registered admin URLs."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings, advertised_admin_url
from app.security.sasl import make_credential
from tests.api.helpers import Api, eventually, served_node, two_nodes
from tests.api.test_auth_errors_redirect import owned_group

TOKEN = "tok-9f2"
PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2", "root": "root-pw-3"}
JSON = {"Content-Type": "application/json"}


def basic(name: str, password: str | None = None) -> dict[str, str]:
    pair = f"{name}:{PASSWORDS[name] if password is None else password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode(), **JSON}


BEARER = {"Authorization": f"Bearer {TOKEN}", **JSON}


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "coordinator.audit"]


async def add_users(api: Api, *names: str) -> None:
    assert api.security is not None
    await api.rn.log.upsert_scram_credentials(
        [make_credential(n, "SCRAM-SHA-256", PASSWORDS[n]) for n in names]
    )
    await api.security.refresh()


@pytest.fixture
async def acl_api(tmp_path: Path) -> AsyncIterator[Api]:
    """Token TOKEN, the ACL authorizer, super user root; users alice, bob and root. Its
    client sends no credentials."""
    async with served_node(
        tmp_path, token=TOKEN, security=True, authorizer="acl", super_users="User:root"
    ) as api:
        api.http.headers.pop("Authorization", None)
        await add_users(api, "alice", "bob", "root")
        yield api


async def make_group(api: Api, group: str, offsets: dict[tuple[str, int], int]) -> None:
    body = {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]}
    r = await api.http.post(f"/groups/{group}/offsets", json=body, headers=BEARER)
    assert r.status_code == 200, r.text


async def grant(api: Api, *acls: dict[str, Any]) -> None:
    r = await api.http.post("/acls", json=list(acls), headers=BEARER)
    assert r.status_code == 201, r.text


# ==== authentication ===========================================================================


async def test_token_basic_or_nothing(acl_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    http = acl_api.http
    assert (await http.get("/groups")).status_code == 401
    assert (await http.get("/groups", headers=BEARER)).status_code == 200
    assert (await http.get("/groups", headers=basic("root"))).status_code == 200
    # the probes need nothing
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await http.get(path)).status_code == 200
    caplog.clear()
    for headers in (
        basic("alice", "Wr0ng-Secret"),
        basic("alice", ""),
        basic("nobody", "x"),
        {"Authorization": "Basic !!!notbase64"},
        {"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()},
        {"Authorization": "Bearer wrong"},
    ):
        r = await http.get("/groups", headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert "Basic" in r.headers["www-authenticate"]
        assert "HTTP Basic" in r.json()["detail"]
    lines = audit_lines(caplog)
    assert len(lines) == 6, lines
    assert all(x["action"] == "authenticate" and x["outcome"] == "failure" for x in lines)
    assert all(x["source"] == "127.0.0.1" and x["resource"] == "GET /groups" for x in lines)
    assert lines[0]["principal"] == "User:alice"
    assert PASSWORDS["alice"] not in caplog.text and "Wr0ng-Secret" not in caplog.text


async def test_without_a_token_the_api_stays_open_but_basic_is_checked(tmp_path: Path) -> None:
    async with served_node(tmp_path, security=True, authorizer="acl") as api:
        await add_users(api, "alice")
        assert (await api.http.get("/cluster")).status_code == 200  # today's behaviour
        r = await api.http.get("/cluster", headers=basic("alice", "nope"))
        assert r.status_code == 401
        # a Basic user is held to the ACLs (none: denied)
        r = await api.http.get("/cluster", headers=basic("alice"))
        assert r.status_code == 403, r.text


async def test_basic_needs_a_security_manager(tmp_path: Path) -> None:
    async with served_node(tmp_path, token=TOKEN) as api:
        r = await api.http.get("/groups", headers=basic("alice"))
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"


async def test_password_hashing_runs_off_the_event_loop(
    acl_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.security.sasl as sasl

    threads: list[str] = []
    real = sasl.verify_password

    def spy(credential: Any, password: str) -> bool:
        threads.append(threading.current_thread().name)
        return real(credential, password)

    monkeypatch.setattr(sasl, "verify_password", spy)
    assert (await acl_api.http.get("/groups", headers=basic("root"))).status_code == 200
    assert threads and all(t.startswith("security") for t in threads), threads


# ==== authorization ==============================================================================


async def test_a_team_user_sees_its_groups_and_nothing_else(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    http = acl_api.http
    await make_group(acl_api, "team-a", {("t6", 0): 5, ("t1", 0): 7})
    await make_group(acl_api, "team-b", {("t6", 1): 6})
    await make_group(acl_api, "other", {("t6", 2): 8})
    await grant(
        acl_api,
        {
            "resource_type": "GROUP",
            "resource_name": "team-",
            "pattern_type": "PREFIXED",
            "principal": "User:alice",
            "operation": "DESCRIBE",
        },
        {
            "resource_type": "TOPIC",
            "resource_name": "t6",
            "principal": "User:alice",
            "operation": "DESCRIBE",
        },
    )
    alice = basic("alice")
    r = await http.get("/groups", headers=alice)
    assert r.status_code == 200
    assert [g["group_id"] for g in r.json()] == ["team-a", "team-b"]
    # the token and a super user see every group
    for headers in (BEARER, basic("root")):
        r = await http.get("/groups", headers=headers)
        assert [g["group_id"] for g in r.json()] == ["other", "team-a", "team-b"]
    # bob has no ACL: an empty list, not an error (ListGroups filters)
    assert (await http.get("/groups", headers=basic("bob"))).json() == []

    r = await http.get("/groups/team-a", headers=alice)
    assert r.status_code == 200, r.text
    # offsets of topics alice may not DESCRIBE are left out, as OffsetFetch does
    assert [(o["topic"], o["offset"]) for o in r.json()["offsets"]] == [("t6", 5)]
    r = await http.get("/groups/team-a/offsets", headers=alice)
    assert [(o["topic"], o["offset"]) for o in r.json()] == [("t6", 5)]
    r = await http.get("/groups/team-a", headers=BEARER)
    assert len(r.json()["offsets"]) == 2

    caplog.clear()
    denied = [
        ("GET", "/groups/other", None, "DESCRIBE GROUP 'other'"),
        ("GET", "/groups/other/offsets", None, "DESCRIBE GROUP 'other'"),
        ("GET", "/groups/no-such", None, "DESCRIBE GROUP 'no-such'"),
        ("POST", "/groups/team-a/rebalance", {"reason": "x"}, "READ GROUP 'team-a'"),
        ("DELETE", "/groups/team-a", None, "DELETE GROUP 'team-a'"),
        ("DELETE", "/groups/team-a/static-members/i", None, "READ GROUP 'team-a'"),
        (
            "POST",
            "/groups/team-a/static-members",
            {"group_instance_ids": ["i"]},
            "READ GROUP 'team-a'",
        ),
        (
            "POST",
            "/groups/team-a/offsets",
            {"offsets": [{"topic": "t6", "partition": 0, "offset": 1}]},
            "READ GROUP 'team-a'",
        ),
        ("POST", "/topics", {"name": "new", "partitions": 1}, "CREATE TOPIC 'new'"),
        ("PATCH", "/topics/t6", {"partitions": 9}, "ALTER TOPIC 't6'"),
        ("GET", "/cluster", None, "DESCRIBE CLUSTER 'kafka-cluster'"),
        ("GET", "/acls", None, "DESCRIBE CLUSTER"),
        (
            "POST",
            "/acls",
            [
                {
                    "resource_type": "TOPIC",
                    "resource_name": "*",
                    "principal": "User:alice",
                    "operation": "ALL",
                }
            ],
            "ALTER CLUSTER",
        ),
        ("DELETE", "/acls?principal=User:alice", None, "ALTER CLUSTER"),
        ("GET", "/users", None, "DESCRIBE CLUSTER"),
        ("PUT", "/users/alice", {"password": "new-one"}, "ALTER CLUSTER"),
        ("DELETE", "/users/bob", None, "ALTER CLUSTER"),
    ]
    for method, path, body, needle in denied:
        r = await http.request(method, path, json=body, headers=alice)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert r.json()["detail"].startswith("User:alice is not authorized to "), r.text
        assert needle in r.json()["detail"], (needle, r.text)
    lines = audit_lines(caplog)
    assert len(lines) == len(denied), lines  # one line each, none for the mutations again
    assert {x["outcome"] for x in lines} == {"denied"}
    assert {x["principal"] for x in lines} == {"User:alice"}
    assert lines[0]["resource"] == "GROUP:other" and lines[0]["action"] == "DESCRIBE"
    # what alice may see of topics: t6 only
    assert (await http.get("/topics", headers=alice)).json() == {"t6": 6}
    # the cluster's nodes are listed to any authenticated caller (the CLI checks redirects)
    r = await http.get("/cluster/nodes", headers=alice)
    assert r.status_code == 200 and r.json()[0]["admin_url"] == acl_api.url


async def test_reset_offsets_needs_topic_read_and_rights_follow_acl_changes(acl_api: Api) -> None:
    http = acl_api.http
    await make_group(acl_api, "team-x", {("t6", 0): 1})
    bob = basic("bob")
    body = {"offsets": [{"topic": "t6", "partition": 0, "offset": 3}]}
    await grant(
        acl_api,
        {
            "resource_type": "GROUP",
            "resource_name": "team-x",
            "principal": "User:bob",
            "operation": "READ",
        },
    )
    r = await http.post("/groups/team-x/offsets", json=body, headers=bob)
    assert r.status_code == 403 and "READ TOPIC 't6'" in r.json()["detail"], r.text
    await grant(
        acl_api,
        {
            "resource_type": "TOPIC",
            "resource_name": "*",
            "principal": "User:bob",
            "operation": "READ",
        },
    )
    r = await http.post("/groups/team-x/offsets", json=body, headers=bob)
    assert r.status_code == 200, r.text
    # READ implies DESCRIBE (Kafka's rule), so bob sees the group now
    assert (await http.get("/groups/team-x", headers=bob)).status_code == 200
    # DENY wins, and a deleted ACL stops applying at once on this node
    await grant(
        acl_api,
        {
            "resource_type": "GROUP",
            "resource_name": "team-",
            "pattern_type": "PREFIXED",
            "principal": "User:bob",
            "host": "127.0.0.1",
            "operation": "ALL",
            "permission": "DENY",
        },
    )
    assert (await http.get("/groups/team-x", headers=bob)).status_code == 403
    r = await http.request(
        "DELETE", "/acls", json={"principal": "User:bob", "permission": "DENY"}, headers=BEARER
    )
    assert r.status_code == 200 and len(r.json()) == 1, r.text
    assert (await http.get("/groups/team-x", headers=bob)).status_code == 200
    # an ACL for another host does not apply to a caller from 127.0.0.1
    await grant(
        acl_api,
        {
            "resource_type": "CLUSTER",
            "resource_name": "kafka-cluster",
            "principal": "User:bob",
            "host": "10.1.2.3",
            "operation": "DESCRIBE",
        },
    )
    assert (await http.get("/cluster", headers=bob)).status_code == 403
    # creating a topic: CLUSTER CREATE or TOPIC CREATE on its name
    await grant(
        acl_api,
        {
            "resource_type": "TOPIC",
            "resource_name": "bobs-",
            "pattern_type": "PREFIXED",
            "principal": "User:bob",
            "operation": "CREATE",
        },
    )
    r = await http.post("/topics", json={"name": "bobs-topic", "partitions": 2}, headers=bob)
    assert r.status_code == 201, r.text
    r = await http.post("/topics", json={"name": "not-bobs", "partitions": 2}, headers=bob)
    assert r.status_code == 403


# ==== no cross-site requests =====================================================================


async def test_mutations_must_be_json(acl_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    http = acl_api.http
    auth = {"Authorization": f"Bearer {TOKEN}"}
    http.headers.pop("Content-Type", None)
    for method, path, kwargs in [
        ("POST", "/topics", {"data": {"name": "x", "partitions": "1"}}),  # a form
        ("POST", "/topics", {"content": b'{"name": "x", "partitions": 1}'}),  # no type
        (
            "POST",
            "/topics",
            {
                "content": b'{"name": "x", "partitions": 1}',
                "headers": {"Content-Type": "text/plain"},
            },
        ),
        ("POST", "/groups/g/rebalance", {}),  # no body: a no-CORS fetch could send it
        # a DELETE with a body needs JSON too (without one it needs no type: the next test)
        ("DELETE", "/groups/g", {"content": b"{}", "headers": {"Content-Type": "text/plain"}}),
        ("PUT", "/users/eve", {"files": {"password": b"x"}}),
        ("DELETE", "/acls?resource_type=ANY", {"data": {"resource_type": "ANY"}}),
        ("PATCH", "/topics/t1", {"data": {"partitions": "5"}}),
    ]:
        headers = {**auth, **kwargs.pop("headers", {})}
        r = await http.request(method, path, headers=headers, **kwargs)
        assert r.status_code == 415, (method, path, r.status_code, r.text)
        assert "application/json" in r.json()["detail"]
    assert "x" not in (await http.get("/topics", headers=auth)).json()
    lines = audit_lines(caplog)
    assert len(lines) == 8 and {x["status"] for x in lines} == {415}, lines
    assert {x["outcome"] for x in lines} == {"failure"}
    # with the type (parameters allowed), the same calls work
    r = await http.post(
        "/topics",
        content=b'{"name": "x", "partitions": 1}',
        headers={**auth, "Content-Type": "application/json; charset=utf-8"},
    )
    assert r.status_code == 201, r.text


async def test_a_delete_without_a_body_needs_no_content_type(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """`curl -X DELETE -H 'Authorization: Bearer …' …/groups/G/static-members/I` as a new
    user types it: no body, no Content-Type, and the member is gone. A DELETE with a body
    still needs JSON, and a foreign Origin is refused before any route."""
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    ids = {"group_instance_ids": ["i-1", "i-2", "i-3"]}
    r = await acl_api.http.post("/groups/g/static-members", json=ids, headers=BEARER)
    assert r.status_code == 200, r.text
    async with httpx.AsyncClient(base_url=acl_api.url) as curl:  # no default headers
        caplog.clear()
        r = await curl.delete("/groups/g/static-members/i-1", headers=auth)
        assert "content-type" not in r.request.headers
        assert r.status_code == 204, r.text
        g = (await curl.get("/groups/g", headers=auth)).json()
        assert sorted(g["registered_static_members"]) == ["i-2", "i-3"]
        [line] = audit_lines(caplog)
        assert (line["action"], line["outcome"], line["status"]) == (
            "remove_static_member",
            "success",
            204,
        )
        # Content-Length: 0 is no body either
        r = await curl.delete(
            "/groups/g/static-members/i-2", headers={**auth, "Content-Length": "0"}
        )
        assert r.status_code == 204, r.text

        async def chunks() -> AsyncIterator[bytes]:
            yield b"{}"

        for content in (b"{}", chunks()):  # sized, then chunked
            r = await curl.request(
                "DELETE",
                "/groups/g/static-members/i-3",
                content=content,
                headers={**auth, "Content-Type": "text/plain"},
            )
            assert r.status_code == 415 and "application/json" in r.json()["detail"], r.text
        # without a body, from another site: the Origin check refuses it before any route
        r = await curl.delete(
            "/groups/g/static-members/i-3", headers={**auth, "Origin": "https://evil.example"}
        )
        assert r.status_code == 403 and "cross-origin" in r.json()["detail"], r.text
        g = (await curl.get("/groups/g", headers=auth)).json()
        assert g["registered_static_members"] == ["i-3"]
        # with a JSON body, as before
        r = await curl.request(
            "DELETE", "/groups/g/static-members/i-3", content=b"{}", headers={**auth, **JSON}
        )
        assert r.status_code == 204, r.text
        assert (await curl.get("/groups/g", headers=auth)).json()["registered_static_members"] == []


async def test_no_cors_unless_configured(tmp_path: Path) -> None:
    site = "https://ops.example.com"
    async with served_node(tmp_path, token=TOKEN) as api:
        r = await api.http.get("/groups", headers={"Origin": site})
        assert r.status_code == 403 and "cross-origin" in r.json()["detail"], r.text
        assert not any(k.lower().startswith("access-control") for k in r.headers)
        r = await api.http.options(
            "/groups",
            headers={"Origin": site, "Access-Control-Request-Method": "DELETE"},
        )
        assert r.status_code == 403, r.text
        assert not any(k.lower().startswith("access-control") for k in r.headers), r.headers
        # the console's own calls are same-origin
        r = await api.http.get("/groups", headers={"Origin": api.url})
        assert r.status_code == 200, r.text
    async with served_node(
        tmp_path / "cors", token=TOKEN, admin_cors_origins=f"{site}, https://b.example"
    ) as api:
        r = await api.http.get("/groups", headers={"Origin": site})
        assert r.headers["access-control-allow-origin"] == site
        r = await api.http.options(
            "/groups",
            headers={
                "Origin": site,
                "Access-Control-Request-Method": "DELETE",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == site
        assert "access-control-allow-credentials" not in r.headers
        r = await api.http.get("/groups", headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


# ==== the audit trail ============================================================================


async def test_every_mutation_writes_one_audit_line(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    http = acl_api.http
    secret = "n3w-Pa55word-for-carol"
    calls: list[tuple[str, str, Any, dict[str, str], int]] = [
        ("POST", "/topics", {"name": "audited", "partitions": 2}, BEARER, 201),
        ("PATCH", "/topics/audited", {"partitions": 3}, basic("root"), 200),
        ("PUT", "/users/carol", {"mechanism": "SCRAM-SHA-512", "password": secret}, BEARER, 200),
        (
            "POST",
            "/acls",
            [
                {
                    "resource_type": "GROUP",
                    "resource_name": "c-",
                    "pattern_type": "PREFIXED",
                    "principal": "User:carol",
                    "operation": "READ",
                }
            ],
            BEARER,
            201,
        ),
        (
            "POST",
            "/groups/c-1/offsets",
            {"offsets": [{"topic": "t1", "partition": 0, "offset": 4}]},
            BEARER,
            200,
        ),
        ("POST", "/groups/c-1/rebalance", {"reason": "audit me"}, BEARER, 409),
        ("DELETE", "/groups/c-1", None, BEARER, 204),
        ("DELETE", "/acls", {"principal": "User:carol"}, BEARER, 200),
        ("DELETE", "/users/carol?mechanism=SCRAM-SHA-512", None, BEARER, 204),
        ("DELETE", "/users/carol", None, BEARER, 404),
    ]
    caplog.clear()
    for method, path, body, headers, status in calls:
        r = await http.request(method, path, json=body, headers=headers)
        assert r.status_code == status, (method, path, r.text)
    lines = audit_lines(caplog)
    assert [(x["action"], x["outcome"], x["status"]) for x in lines] == [
        ("create_topic", "success", 201),
        ("grow_topic", "success", 200),
        ("set_user", "success", 200),
        ("create_acls", "success", 201),
        ("set_offsets", "success", 200),
        ("force_rebalance", "failure", 409),
        ("delete_group", "success", 204),
        ("delete_acls", "success", 200),
        ("delete_user", "success", 204),
        ("delete_user", "failure", 404),
    ], lines
    by = {x["action"]: x for x in lines}
    assert all(x["source"] == "127.0.0.1" and x["ts"] > 0 for x in lines)
    assert by["create_topic"]["principal"] == "admin-token"
    assert by["create_topic"]["resource"] == "TOPIC:audited"
    assert by["grow_topic"]["principal"] == "User:root"
    assert by["set_user"]["resource"] == "USER:carol"
    assert by["set_user"]["mechanism"] == "SCRAM-SHA-512" and by["set_user"]["iterations"] == 4096
    assert by["create_acls"]["acls"][0]["principal"] == "User:carol"
    assert by["delete_acls"]["deleted"][0]["resource_name"] == "c-"
    assert by["set_offsets"]["resource"] == "GROUP:c-1"
    assert by["force_rebalance"]["reason"] == "audit me"
    # the password is nowhere: not in a log line, not in an answer
    assert secret not in caplog.text
    # reads write nothing
    caplog.clear()
    await http.get("/groups", headers=BEARER)
    await http.get("/users", headers=BEARER)
    assert audit_lines(caplog) == []


# ==== /users and /acls ===========================================================================


async def test_users_api(acl_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    http = acl_api.http
    import app.admin.security as security_admin

    threads: list[str] = []
    real = security_admin.make_credential

    def spy(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(security_admin, "make_credential", spy)
    r = await http.put(
        "/users/dave",
        json={"mechanism": "scram-sha-256", "password": "d4ve", "iterations": 8192},
        headers=BEARER,
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "dave", "mechanism": "SCRAM-SHA-256", "iterations": 8192}
    assert threads and all(t.startswith("security") for t in threads), threads  # off the loop
    r = await http.get("/users", headers=BEARER)
    assert {"name": "dave", "mechanism": "SCRAM-SHA-256", "iterations": 8192} in r.json()
    assert "password" not in r.text and "d4ve" not in r.text
    # dave logs in with it at once
    PASSWORDS["dave"] = "d4ve"
    assert (await http.get("/cluster/nodes", headers=basic("dave"))).status_code == 200
    for body, needle in [
        ({"password": "x", "iterations": 100}, "iterations"),
        ({"password": "x", "iterations": 10**6}, "iterations"),
        ({"password": "", "mechanism": "SCRAM-SHA-256"}, "password"),
        ({"password": "x", "mechanism": "MD5"}, "mechanism"),
        ({"mechanism": "SCRAM-SHA-256"}, "password"),
        ({"password": "a\ud800b"}, "password"),  # SASLprep refuses a lone surrogate
        ({"password": "a\u0000b"}, "password"),  # and control characters
    ]:
        r = await http.put("/users/dave", content=json.dumps(body), headers=BEARER)
        assert r.status_code == 422 and needle in r.json()["detail"], (body, r.text)
    r = await http.put("/users/%01bad", json={"password": "x"}, headers=BEARER)
    assert r.status_code == 422 and "user name" in r.json()["detail"], r.text
    r = await http.delete("/users/dave?mechanism=SCRAM-SHA-512", headers=BEARER)
    assert r.status_code == 404
    r = await http.delete("/users/dave", headers=BEARER)
    assert r.status_code == 204
    assert (await http.get("/cluster/nodes", headers=basic("dave"))).status_code == 401
    r = await http.delete("/users/dave?mechanism=SHA-1", headers=BEARER)
    assert r.status_code == 422


async def test_acls_api(acl_api: Api) -> None:
    http = acl_api.http
    binding = {
        "resource_type": "group",
        "resource_name": "payments",
        "principal": "User:erin",
        "operation": "read",
    }
    r = await http.post("/acls", json=[binding], headers=BEARER)
    assert r.status_code == 201, r.text
    stored = {
        "resource_type": "GROUP",
        "resource_name": "payments",
        "pattern_type": "LITERAL",
        "principal": "User:erin",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    assert r.json() == [stored]
    assert (await http.get("/acls", headers=BEARER)).json() == [stored]
    assert (await http.get("/acls?principal=User:erin", headers=BEARER)).json() == [stored]
    assert (await http.get("/acls?resource_type=TOPIC", headers=BEARER)).json() == []
    r = await http.get(
        "/acls?pattern_type=MATCH&resource_name=payments&resource_type=GROUP", headers=BEARER
    )
    assert r.json() == [stored]
    for bad, needle in [
        ({**binding, "resource_type": "CLUSTER", "operation": "ALTER"}, "kafka-cluster"),
        ({**binding, "operation": "WRITE"}, "WRITE does not apply to GROUP"),
        ({**binding, "principal": "erin"}, "Type:name"),
        ({**binding, "permission": "MAYBE"}, "permission"),
        ({**binding, "resource_type": "USER"}, "resource_type"),
    ]:
        r = await http.post("/acls", json=[stored, bad], headers=BEARER)
        assert r.status_code == 422 and needle in r.json()["detail"], (bad, r.text)
    assert len((await http.get("/acls", headers=BEARER)).json()) == 1  # all or nothing
    assert (await http.post("/acls", json=[], headers=BEARER)).status_code == 422
    assert (await http.get("/acls?operation=NOPE", headers=BEARER)).status_code == 422
    # deleting needs a filter
    r = await http.delete("/acls", headers=BEARER)
    assert r.status_code == 422 and "filter" in r.json()["detail"]
    r = await http.request("DELETE", "/acls", json=[{"principal": "User:nobody"}], headers=BEARER)
    assert r.status_code == 200 and r.json() == []
    r = await http.delete("/acls?resource_type=GROUP&principal=User:erin", headers=BEARER)
    assert r.status_code == 200 and r.json() == [stored]
    assert (await http.get("/acls", headers=BEARER)).json() == []


async def test_acls_and_users_need_the_security_manager(tmp_path: Path) -> None:
    async with served_node(tmp_path, token=TOKEN) as api:
        for method, path in [("GET", "/acls"), ("GET", "/users")]:
            r = await api.http.request(method, path)
            assert r.status_code == 503 and "security manager" in r.json()["detail"]


# ==== redirects only to registered admin URLs ===================================================


def test_the_registered_admin_url() -> None:
    def url(**kw: Any) -> str | None:
        return advertised_admin_url(Settings(**kw))

    assert url(admin_listen="127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert url(admin_listen="10.0.0.5:81", admin_ssl_certfile="c.pem") == "https://10.0.0.5:81"
    assert url(admin_listen="[::1]:8080") == "http://[::1]:8080"
    assert url(admin_listen="node1:8080") == "http://node1:8080"
    for wildcard in ("0.0.0.0:8080", ":8080", "[::]:8080"):
        assert url(admin_listen=wildcard) is None, wildcard
    assert (
        url(admin_listen="0.0.0.0:8080", advertised_admin_url="https://coord-1.example:8443/")
        == "https://coord-1.example:8443"
    )
    for bad in ("coord-1:8080", "ftp://x", "http://u:p@x:1", "http://x:1/admin", "http://"):
        with pytest.raises(ValueError, match="COORD_ADVERTISED_ADMIN_URL"):
            url(advertised_admin_url=bad)


async def test_redirects_go_to_the_advertised_admin_url_only(tmp_path: Path) -> None:
    per_node = {
        1: {"advertised_admin_url": "http://localhost:{port}"},
        2: {"admin_listen": "0.0.0.0:{port}"},  # no advertised URL: unknown
    }
    async with two_nodes(tmp_path, token=TOKEN, per_node=per_node) as (a, b):
        await settled_one_url(a, b)
        g_a, g_b = owned_group(a, "adv-a"), owned_group(b, "adv-b")
        port_a = a.url.rsplit(":", 1)[1]
        async with httpx.AsyncClient(timeout=30, headers=BEARER) as http:
            # node 1's groups through node 2: to node 1's advertised URL, whatever the Host
            r = await http.get(f"{b.url}/groups/{g_a}", headers={"Host": "localhost:1"})
            assert r.status_code == 307
            assert r.headers["location"] == f"http://localhost:{port_a}/groups/{g_a}"
            # node 2 registered no admin URL (it listens on 0.0.0.0): 503, no redirect
            r = await http.get(f"{a.url}/groups/{g_b}")
            assert r.status_code == 503 and "admin URL is unknown" in r.json()["detail"]
            nodes = (await http.get(f"{a.url}/cluster/nodes")).json()
            assert {n["node_id"]: n["admin_url"] for n in nodes} == {
                1: f"http://localhost:{port_a}",
                2: None,
            }


async def settled_one_url(a: Any, b: Any) -> None:
    """Like `settled`, for a cluster where node 2 registered no admin URL."""

    def ok() -> bool:
        na, nb = a.node, b.node
        if not (na.partitions and nb.partitions and na.ready() and nb.ready()):
            return False
        if len(na.partitions) + len(nb.partitions) != 9 or set(na.partitions) & set(nb.partitions):
            return False
        return all(
            x.node.owner_of(pid) == x.node.plan.get(pid) for x in (a, b) for pid in range(-1, 8)
        )

    await eventually(ok, 30, "two nodes with agreed owners")
