"""The admin side's holes an attacker found (issue 43), each shut: proxy headers only from
trusted proxies, the Host and Origin checks, the node credential of the fan-out, sessions that
end with the user's credentials, throttled and audited console logins, bounded requests, and
console pages for any group id."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from api import peers
from app.runtime.runtime import now_ms
from app.security.sasl import make_credential
from tests.api.helpers import Api, eventually, served_node
from tests.api.test_admin_security import (
    BEARER,
    JSON,
    TOKEN,
    acl_api,
    add_users,
    audit_lines,
    basic,
    grant,
    make_group,
)
from tests.support.ports import free_port

__all__ = ["acl_api"]

MALLORY = "mallory-pw-7"


async def add_mallory(api: Api) -> None:
    assert api.security is not None
    await api.rn.log.upsert_scram_credentials(
        [make_credential("mallory", "SCRAM-SHA-256", MALLORY)]
    )
    await api.security.refresh()


def mallory(**headers: str) -> dict[str, str]:
    pair = base64.b64encode(f"mallory:{MALLORY}".encode()).decode()
    return {"Authorization": f"Basic {pair}", **JSON, **headers}


def with_session(cookie: str) -> dict[str, str]:
    return {"Cookie": f"coordinator_session={cookie}", **JSON}


# ==== 2. X-Forwarded-For =======================================================================


async def _bob_group_only_from_10_9_9_9(api: Api) -> None:
    await add_mallory(api)
    await make_group(api, "bob-grp", {("t6", 0): 1})
    await grant(
        api,
        {
            "resource_type": "GROUP",
            "resource_name": "bob-grp",
            "principal": "User:mallory",
            "host": "10.9.9.9",
            "operation": "DESCRIBE",
        },
    )


async def test_x_forwarded_for_is_not_believed_from_an_untrusted_peer(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    await _bob_group_only_from_10_9_9_9(acl_api)
    forged = mallory(**{"X-Forwarded-For": "10.9.9.9"})
    r = await acl_api.http.get("/groups/bob-grp", headers=forged)
    assert r.status_code == 403, r.text
    denial = [x for x in audit_lines(caplog) if x["outcome"] == "denied"]
    assert [(x["principal"], x["source"]) for x in denial] == [("User:mallory", "127.0.0.1")]


async def test_x_forwarded_for_is_believed_from_a_named_trusted_proxy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    async with served_node(
        tmp_path,
        token=TOKEN,
        security=True,
        authorizer="acl",
        admin_trusted_proxies="127.0.0.0/8",
    ) as api:
        api.http.headers.pop("Authorization", None)
        await _bob_group_only_from_10_9_9_9(api)
        r = await api.http.get("/groups/bob-grp", headers=mallory())
        assert r.status_code == 403  # from the proxy's own address: not 10.9.9.9
        caplog.clear()
        r = await api.http.post(
            "/groups/bob-grp/rebalance",
            json={},
            headers=mallory(**{"X-Forwarded-For": "10.9.9.9", **JSON}),
        )
        assert r.status_code == 403  # DESCRIBE only: and the audit names the real client
        assert [x["source"] for x in audit_lines(caplog)] == ["10.9.9.9"]
        r = await api.http.get(
            "/groups/bob-grp", headers=mallory(**{"X-Forwarded-For": "10.9.9.9"})
        )
        assert r.status_code == 200, r.text


# ==== 3. Host and Origin =======================================================================


async def test_a_rebinding_host_or_a_foreign_origin_is_refused(tmp_path: Path) -> None:
    """No token, no Basic: the open loopback API a rebinding page would reach."""
    async with served_node(tmp_path) as api:
        http = api.http
        port = api.url.rsplit(":", 1)[1]
        rebind = {"Host": f"rebind.attacker.example:{port}"}
        r = await http.get("/users", headers=rebind)
        assert r.status_code == 400 and "Host" in r.json()["detail"], r.text
        r = await http.get("/groups", headers=rebind)
        assert r.status_code == 400
        origin = {**rebind, "Origin": f"http://rebind.attacker.example:{port}"}
        r = await http.post("/topics", json={"name": "planted", "partitions": 1}, headers=origin)
        assert r.status_code == 400
        # a foreign origin with the node's own Host: refused before any route
        r = await http.post(
            "/topics",
            json={"name": "planted", "partitions": 1},
            headers={"Origin": "https://evil.example"},
        )
        assert r.status_code == 403 and "cross-origin" in r.json()["detail"]
        r = await http.post("/topics", json={"name": "planted", "partitions": 1},
                            headers={"Origin": "null"})  # fmt: skip
        assert r.status_code == 403
        assert "planted" not in (await http.get("/topics")).json()
        # the names this node answers to, and the same-origin console
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST"):
            assert (await http.get("/groups", headers={"Host": host})).status_code == 200, host
        r = await http.post(
            "/topics",
            json={"name": "mine", "partitions": 1},
            headers={"Origin": f"http://127.0.0.1:{port}"},
        )
        assert r.status_code == 201, r.text
        # the probes are checked too: nothing of this node answers a foreign Host
        assert (await http.get("/healthz", headers=rebind)).status_code == 400


async def test_a_proxied_name_is_served_once_listed(tmp_path: Path) -> None:
    async with served_node(tmp_path, admin_allowed_hosts="admin.example.com, [::1]") as api:
        for host in ("admin.example.com", "admin.example.com:443", "[::1]:8080"):
            assert (await api.http.get("/groups", headers={"Host": host})).status_code == 200
        assert (await api.http.get("/groups", headers={"Host": "other.example"})).status_code == 400


# ==== 1. bounded admin requests ================================================================


async def test_registrations_are_bounded_by_the_group_size_and_requests_by_their_elements(
    tmp_path: Path,
) -> None:
    async with served_node(tmp_path, group_max_size=150, max_request_elements=100) as api:
        http = api.http
        ids = [f"i-{n}" for n in range(100)]
        r = await http.post("/groups/g/static-members", json={"group_instance_ids": ids})
        assert r.status_code == 200, r.text
        r = await http.post(
            "/groups/g/static-members", json={"group_instance_ids": [f"j-{n}" for n in range(51)]}
        )
        assert r.status_code == 422 and "group.max.size (150)" in r.json()["detail"], r.text
        r = await http.post(
            "/groups/g/static-members", json={"group_instance_ids": [f"k-{n}" for n in range(101)]}
        )
        assert r.status_code == 413 and "COORD_MAX_REQUEST_ELEMENTS" in r.json()["detail"]
        g = (await http.get("/groups/g")).json()
        assert sorted(g["registered_static_members"]) == sorted(ids)
        # a resubmission names at most a few of the ids it refuses
        r = await http.post("/groups/g/static-members", json={"group_instance_ids": ids[:40]})
        assert r.status_code == 422 and "and 20 more" in r.json()["detail"], r.text
        dupes = ["d"] * 30
        r = await http.post("/groups/h/static-members", json={"group_instance_ids": dupes})
        assert r.status_code == 422 and "duplicate group_instance_ids: ['d']" in r.text

        offsets = [{"topic": "t6", "partition": 0, "offset": n} for n in range(101)]
        r = await http.post("/groups/o/offsets", json={"offsets": offsets})
        assert r.status_code == 413, r.text
        assert (await http.get("/groups/o")).status_code == 404  # nothing was written


async def test_a_body_over_the_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    async with served_node(tmp_path, admin_max_body_bytes=4096) as api:
        ids = [f"instance-{n:05d}" for n in range(1000)]  # ~19 kB of JSON
        r = await api.http.post("/groups/g/static-members", json={"group_instance_ids": ids})
        assert r.status_code == 413 and "COORD_ADMIN_MAX_BODY_BYTES" in r.json()["detail"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"group_instance_ids": ['
            for n in range(1000):
                yield f'"x-{n:05d}",'.encode()
            yield b'"last"]}'

        r = await api.http.post("/groups/g/static-members", content=chunks())
        assert r.status_code == 413, r.text
        assert (await api.http.get("/groups/g")).status_code == 404


# ==== 4. the fan-out's credential ==============================================================


@contextlib.asynccontextmanager
async def recording_peer(host: str) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """An HTTP server posing as another node's admin API: it records what it is sent."""
    seen: list[dict[str, str]] = []
    app = FastAPI()

    @app.get("/groups")
    async def groups(request: Request) -> list[dict[str, Any]]:
        seen.append(dict(request.headers))
        return [{"group_id": "on-the-peer"}]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server._serve())
    try:
        await eventually(lambda: server.started, 10, "the recording peer")
        yield f"http://{host}:{port}", seen
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def live_peer(api: Api, url: str) -> AsyncIterator[None]:
    """A node row for `url`, heartbeating, as another node of the store would keep it."""
    log = api.rn.log

    async def beat() -> None:
        while True:
            await log.heartbeat_node(99, await log.clock_ms())
            await asyncio.sleep(0.2)

    await log.register_node(99, "127.0.0.1", 1, url, await log.clock_ms())
    task = asyncio.create_task(beat())
    try:
        await eventually(lambda: 99 in api.node.live_brokers, 15, "the peer seen live")
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await log.deregister_node(99)


async def test_the_fan_out_sends_a_scoped_credential_never_the_token(acl_api: Api) -> None:
    await add_mallory(acl_api)
    async with recording_peer("127.0.0.1") as (url, seen), live_peer(acl_api, url):
        r = await acl_api.http.get("/groups", headers=mallory())
        assert r.status_code == 200
        sent = seen[-1]["authorization"]
        assert TOKEN not in sent and "Basic" not in sent and MALLORY not in sent
        assert sent.startswith(peers.SCHEME + " ")
        # what it says: mallory, from mallory's address, listing groups only, for a while
        claim = peers.verify(await acl_api.node.log.ensure_peer_key(), sent.split(" ", 1)[1],
                             now_ms())  # fmt: skip
        assert claim == peers.Claim("User:mallory", "127.0.0.1", False)
        # the token's caller is not sent the token either
        r = await acl_api.http.get("/groups", headers=BEARER)
        assert TOKEN not in seen[-1]["authorization"]
        assert r.status_code == 200 and "on-the-peer" in [g["group_id"] for g in r.json()]


async def test_a_node_credential_lists_groups_and_nothing_else(acl_api: Api) -> None:
    await make_group(acl_api, "g1", {("t6", 0): 1})
    key = await acl_api.node.log.ensure_peer_key()
    full = peers.mint(key, peers.Claim("admin-token", "127.0.0.1", True), now_ms())
    r = await acl_api.http.get("/groups", headers={"Authorization": full})
    assert r.status_code == 200 and [g["group_id"] for g in r.json()] == ["g1"]
    for method, path in [("GET", "/groups/g1"), ("GET", "/users"), ("DELETE", "/groups/g1")]:
        r = await acl_api.http.request(method, path, headers={"Authorization": full, **JSON})
        assert r.status_code == 401, (method, path, r.text)
    # expired, tampered with, or signed with another key: refused
    old = peers.mint(key, peers.Claim("admin-token", "127.0.0.1", True), now_ms() - 60_000)
    scheme, value = full.split(" ", 1)
    payload, signature = value.split(".")
    tampered = f"{scheme} {payload[:-2]}AA.{signature}"
    other = peers.mint(os.urandom(32), peers.Claim("admin-token", "127.0.0.1", True), now_ms())
    for bad in (old, tampered, other):
        assert (
            await acl_api.http.get("/groups", headers={"Authorization": bad})
        ).status_code == 401
    # a claim for a user is held to that user's ACLs on the receiving node
    bob = peers.mint(key, peers.Claim("User:bob", "127.0.0.1", False), now_ms())
    assert (await acl_api.http.get("/groups", headers={"Authorization": bob})).json() == []


def loopback_name() -> str:
    """A name of this machine that is not a loopback literal but resolves to loopback (the
    hosts file's own name): what a peer on another machine looks like to the fan-out."""
    name = socket.gethostname()
    address = socket.gethostbyname(name)
    assert address.startswith("127."), f"{name} resolves to {address}, not loopback"
    return name


async def test_no_plain_http_fan_out_to_another_machine_unless_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = loopback_name()
    for allowed in (False, True):
        async with (
            served_node(tmp_path / str(allowed), token=TOKEN, admin_peer_plaintext=allowed) as api,
            recording_peer(name) as (url, seen),
            live_peer(api, url),
        ):
            r = await api.http.get("/groups")
            assert r.status_code == 200
            assert bool(seen) is allowed
            listed = "on-the-peer" in [g["group_id"] for g in r.json()]
            assert listed is allowed
    assert any("plain http to another machine" in r.getMessage() for r in caplog.records)


# ==== 5, 6. console sessions and logins ========================================================


async def console_login(api: Api, name: str, password: str) -> httpx.Response:
    return await api.http.post("/ui/session", json={"user": name, "password": password})


async def test_a_credential_change_or_deletion_ends_the_users_sessions(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    http = acl_api.http
    await make_group(acl_api, "tmp-grp", {("t6", 0): 1})
    await grant(
        acl_api,
        {"resource_type": "GROUP", "resource_name": "tmp-grp", "principal": "User:tmpuser",
         "operation": "READ"},
    )  # fmt: skip
    r = await http.put("/users/tmpuser", json={"password": "first-pw"}, headers=BEARER)
    assert r.status_code == 200

    async def reads(cookie: str) -> int:
        r = await http.get("/groups/tmp-grp", headers=with_session(cookie))
        return r.status_code

    assert (await console_login(acl_api, "tmpuser", "first-pw")).status_code == 204
    first = http.cookies["coordinator_session"]
    http.cookies.clear()
    assert await reads(first) == 200
    r = await http.put("/users/tmpuser", json={"password": "second-pw"}, headers=BEARER)
    assert r.status_code == 200
    assert await reads(first) == 401
    r = await http.post("/groups/tmp-grp/rebalance", json={}, headers=with_session(first))
    assert r.status_code == 401
    ended = [x for x in audit_lines(caplog) if x["action"] == "session"]
    assert [(x["outcome"], x["principal"]) for x in ended] == [("ended", "User:tmpuser")]

    # a change made through the store (as another node makes it) ends it within a poll
    assert (await console_login(acl_api, "tmpuser", "second-pw")).status_code == 204
    second = http.cookies["coordinator_session"]
    http.cookies.clear()
    assert await reads(second) == 200
    await acl_api.rn.log.delete_scram_credentials([("tmpuser", "SCRAM-SHA-512")])
    await eventually(lambda: _is(reads(second), 401), 10, "the deleted user's session ended")


async def _is(status: Any, wanted: int) -> bool:
    return bool(await status == wanted)


async def test_console_logins_are_audited_delayed_and_checked_one_at_a_time(
    acl_api: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    assert acl_api.security is not None
    security = acl_api.security
    checking = {"now": 0, "most": 0}
    verify = security.verify_password

    async def counted(name: str, password: str) -> bool:
        checking["now"] += 1
        checking["most"] = max(checking["most"], checking["now"])
        try:
            return await verify(name, password)
        finally:
            checking["now"] -= 1

    monkeypatch.setattr(security, "verify_password", counted)
    for _ in range(4):
        r = await console_login(acl_api, "alice", "wrong")
        assert r.status_code == 401
    lines = [x for x in audit_lines(caplog) if x["action"] == "authenticate"]
    assert [(x["outcome"], x["principal"], x["source"]) for x in lines] == [
        ("failure", "User:alice", "127.0.0.1")
    ] * 4
    # four failures from here: alice's next attempt from here waits 0.1 * 2^3 s first
    assert security.logins.failures(("User:alice", "127.0.0.1")) == 4
    assert security.logins.wait_s(("User:alice", "127.0.0.1")) > 0.5
    # ... but is not refused, and her right password still works
    caplog.clear()
    assert (await console_login(acl_api, "alice", "alice-pw-1")).status_code == 204
    assert security.logins.wait_s(("User:alice", "127.0.0.1")) == 0
    lines = [x for x in audit_lines(caplog) if x["action"] == "authenticate"]
    assert [(x["outcome"], x["principal"]) for x in lines] == [("success", "User:alice")]
    # a storm of logins of different users hashes one at a time, as Basic does
    await add_users(acl_api, "bob", "root")
    names = ["alice", "bob", "root"] * 4
    await asyncio.gather(*(console_login(acl_api, n, "wrong") for n in names))
    assert checking["most"] == 1


async def test_the_token_and_basic_logins_share_the_delay(
    acl_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    assert acl_api.security is not None
    for headers in (basic("alice", "wrong"), {"Authorization": "Bearer wrong"}):
        assert (await acl_api.http.get("/groups", headers=headers)).status_code == 401
    r = await acl_api.http.post("/ui/session", json={"token": "wrong"})
    assert r.status_code == 401
    logins = acl_api.security.logins
    assert logins.failures(("User:alice", "127.0.0.1")) == 1
    assert logins.failures(("admin-token", "127.0.0.1")) == 2
    principals = [x["principal"] for x in audit_lines(caplog)]
    assert principals == ["User:alice", "admin-token", "admin-token"]


# ==== 8. files and pages =======================================================================


async def test_the_sqlite_database_and_its_wal_are_private(tmp_path: Path) -> None:
    async with served_node(tmp_path, token=TOKEN) as api:
        await make_group(api, "g", {("t6", 0): 1})
        files = sorted(tmp_path.glob("*.db*"))
        assert {f.suffix for f in files} >= {".db", ".db-wal"}, files
        for f in files:
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, (f, oct(f.stat().st_mode))


@pytest.mark.parametrize("group", ["team/a", "50%", "a%2Fb", "x y/%z"])
async def test_console_pages_show_groups_whose_ids_hold_slashes_or_percents(
    tmp_path: Path, group: str
) -> None:
    from urllib.parse import quote

    async with served_node(tmp_path) as api:
        r = await api.http.post(
            f"/groups/{quote(group, safe='')}/offsets",
            json={"offsets": [{"topic": "t6", "partition": 0, "offset": 3}]},
        )
        assert r.status_code == 200, r.text
        listing = (await api.http.get("/ui/groups")).text
        link = f"/ui/groups/{quote(group, safe='')}"
        assert f'href="{link}"' in listing
        page = await api.http.get(link)
        assert page.status_code == 200, page.text
        assert "does not exist" not in page.text and "Unknown group" not in page.text
