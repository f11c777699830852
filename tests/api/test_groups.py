"""/groups against a real node: its Kafka listener forms the groups
(tests/support/kafka_client.py), its admin app answers over real HTTP (uvicorn)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from tests.api.helpers import (
    REBALANCE_IN_PROGRESS,
    Api,
    Member,
    close_all,
    eventually,
    form_group,
    rebalance,
)
from tests.support.consumer_bytes import assignment, range_assign, subscription
from tests.support.kafka_client import KafkaTestClient

T6 = {"t6": 6}


def detail(r: Any) -> str:
    """Every error is a JSON body with a human message."""
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert isinstance(body.get("detail"), str) and body["detail"].strip(), body
    return str(body["detail"])


async def connect(api: Api, client_id: str) -> KafkaTestClient:
    return await KafkaTestClient.connect("127.0.0.1", api.kafka_port, client_id=client_id)


# ==== describe ===================================================================================


async def test_describe_decodes_every_subscription_version_and_the_assignments(api: Api) -> None:
    members = []
    for v in range(4):  # ConsumerProtocolSubscription v0..v3, one member each
        meta = subscription(
            ["t6"],
            version=v,
            owned={"t6": [v]},
            generation=7,
            rack=f"rack-{v}",
            user_data=b"u" * v,
        )
        client = await connect(api, f"client-{v}")
        members.append(
            Member(
                client,
                "decoded",
                f"inst-{v}" if v % 2 == 0 else None,
                metadata=meta,
                session_timeout_ms=20_000 + v,
                rebalance_timeout_ms=40_000 + v,
            )
        )
    generation = await rebalance(members, T6)
    leader = members[0].leader
    committer = members[0]
    commit = await committer.client.offset_commit(
        "decoded",
        {("t6", 0): 42, ("t6", 5): 7},
        generation_id=generation,
        member_id=committer.member_id,
        group_instance_id=committer.instance_id,
        metadata="m",
    )
    assert all(p.error_code == 0 for t in commit.topics for p in t.partitions)
    r = await api.http.post(
        "/groups/decoded/static-members", json={"group_instance_ids": ["later-1"]}
    )
    assert r.status_code == 200, r.text

    r = await api.http.get("/groups/decoded")
    assert r.status_code == 200, r.text
    g = r.json()
    assert g["group_id"] == "decoded"
    assert g["state"] == "Stable"
    assert g["generation"] == generation == 1
    assert g["protocol_type"] == "consumer"
    assert g["protocol_name"] == "range"
    assert g["leader"] == leader
    assert g["registered_static_members"] == ["later-1"], "registered, not yet joined"
    plan = range_assign([m.member_id for m in members], T6)
    by_id = {m["member_id"]: m for m in g["members"]}
    assert set(by_id) == {m.member_id for m in members}
    assert [m["member_id"] for m in g["members"] if m["leader"]] == [leader]
    for v, m in enumerate(members):
        d = by_id[m.member_id]
        assert d["group_instance_id"] == m.instance_id
        assert d["client_id"] == f"client-{v}"
        assert d["client_host"] == "/127.0.0.1"
        assert d["session_timeout_ms"] == 20_000 + v
        assert d["rebalance_timeout_ms"] == 40_000 + v
        sub = d["subscription"]
        assert sub["version"] == v
        assert sub["topics"] == ["t6"]
        assert sub["user_data_size"] == v
        # fields of later versions are absent (defaults) in earlier ones
        assert sub["owned_partitions"] == ([{"topic": "t6", "partitions": [v]}] if v >= 1 else [])
        assert sub["generation_id"] == (7 if v >= 2 else -1)
        assert sub["rack_id"] == (f"rack-{v}" if v >= 3 else None)
        assert d["assignment"] == {
            "version": 0,
            "partitions": [{"topic": t, "partitions": p} for t, p in plan[m.member_id].items()],
            "user_data_size": 0,
        }
    offsets = [
        {"topic": "t6", "partition": 0, "offset": 42, "metadata": "m"},
        {"topic": "t6", "partition": 5, "offset": 7, "metadata": "m"},
    ]
    keys = ("topic", "partition", "offset", "metadata")
    assert [{k: o[k] for k in keys} for o in g["offsets"]] == offsets
    assert all(o["commit_timestamp_ms"] > 0 and "leader_epoch" in o for o in g["offsets"])
    r = await api.http.get("/groups/decoded/offsets")
    assert r.status_code == 200 and r.json() == g["offsets"]
    await close_all(members)


async def test_describe_shows_size_and_base64_for_other_protocol_types(api: Api) -> None:
    meta = b"\x01\x02connect-worker-metadata"
    members = await form_group(
        api.kafka_port, "connect-cluster", [None, "w2"], protocol_type="connect", metadata=meta
    )
    g = (await api.http.get("/groups/connect-cluster")).json()
    assert g["protocol_type"] == "connect"
    assert g["state"] == "Stable"
    for d in g["members"]:
        assert d["subscription"] == {"size": len(meta), "base64": base64.b64encode(meta).decode()}
        given = f"opaque-{d['member_id']}".encode()  # what the leader assigned (helpers)
        assert d["assignment"] == {"size": len(given), "base64": base64.b64encode(given).decode()}
    # "consumer" bytes that are not a consumer subscription are shown raw, not a 500
    bad = b"\x00\x03zz"
    junk = await form_group(api.kafka_port, "junk", [None], metadata=bad)
    g = (await api.http.get("/groups/junk")).json()
    assert g["members"][0]["subscription"] == {
        "size": len(bad),
        "base64": base64.b64encode(bad).decode(),
    }
    await close_all(members + junk)


async def test_describe_unknown_group_is_404(api: Api) -> None:
    r = await api.http.get("/groups/no-such-group")
    assert r.status_code == 404
    assert "no-such-group" in detail(r)
    r = await api.http.get("/groups/no-such-group/offsets")
    assert r.status_code == 404 and "does not exist" in detail(r)


# ==== list ======================================================================================


async def test_list_groups_with_state_filter(api: Api) -> None:
    stable = await form_group(api.kafka_port, "g-stable", [None])
    preparing = await form_group(api.kafka_port, "g-preparing", ["p1"])
    r = await api.http.post("/groups/g-preparing/rebalance", json={"reason": "list test"})
    assert r.status_code == 200, r.text
    completing = [Member(await connect(api, "c"), "g-completing")]
    await completing[0].join()  # joined, never synced
    r = await api.http.post(
        "/groups/g-empty/offsets", json={"offsets": [{"topic": "t1", "partition": 0, "offset": 1}]}
    )
    assert r.status_code == 200, r.text

    r = await api.http.get("/groups")
    assert r.status_code == 200
    listed = {g["group_id"]: g for g in r.json()}
    assert {k: v["state"] for k, v in listed.items()} == {
        "g-completing": "CompletingRebalance",
        "g-empty": "Empty",
        "g-preparing": "PreparingRebalance",
        "g-stable": "Stable",
    }
    assert [g["group_id"] for g in r.json()] == sorted(listed), "sorted by id"
    assert listed["g-stable"] == {
        "group_id": "g-stable",
        "state": "Stable",
        "protocol_type": "consumer",
        "generation": 1,
        "members": 1,
        "protocol_name": "range",
        "static_members": 0,
        "state_since_ms": listed["g-stable"]["state_since_ms"],
        "log_partition": listed["g-stable"]["log_partition"],
        # the periodic checks' flags; without the gateway lag is unknown
        "unowned_partitions": 0,
        "doubly_owned_partitions": 0,
        "upstream_members": 0,
        "lag": None,
    }
    assert listed["g-stable"]["state_since_ms"] > 1_700_000_000_000  # a wall-clock time
    assert listed["g-empty"]["members"] == 0 and listed["g-empty"]["protocol_type"] == ""
    for state, wanted in [
        ("Stable", ["g-stable"]),
        ("empty", ["g-empty"]),  # case-insensitive, as kafka-consumer-groups --state
        ("PREPARINGREBALANCE", ["g-preparing"]),
        ("CompletingRebalance", ["g-completing"]),
        ("Dead", []),
    ]:
        r = await api.http.get("/groups", params={"state": state})
        assert r.status_code == 200, r.text
        assert [g["group_id"] for g in r.json()] == wanted, state
    r = await api.http.get("/groups", params={"state": "Bogus"})
    assert r.status_code == 422
    assert "state" in detail(r)
    await close_all(stable + preparing + completing)


# ==== static-member registration =================================================================


async def test_register_static_members_validation(api: Api) -> None:
    members = await form_group(api.kafka_port, "reg", ["s0", None])
    url = "/groups/reg/static-members"
    cases: list[tuple[Any, str]] = [
        ({"group_instance_ids": []}, "must not be empty"),
        ({"group_instance_ids": ["a", "b", "a"]}, "duplicate"),
        ({"group_instance_ids": ["n1", "s0"]}, "already members"),
        ({"group_instance_ids": [""]}, "must not be empty"),
        ({"group_instance_ids": ["n1"], "expansion_timeout_ms": 0}, "expansion_timeout_ms"),
        ({"group_instance_ids": ["n1"], "expansion_timeout_ms": -5}, "expansion_timeout_ms"),
        ({"group_instance_ids": "n1"}, "group_instance_ids"),
        ({}, "group_instance_ids"),
    ]
    for body, message in cases:
        r = await api.http.post(url, json=body)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
        assert message in detail(r), (body, r.text)
    r = await api.http.post(url, content=b"not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and detail(r)
    # nothing was registered by the refused calls
    assert (await api.http.get("/groups/reg")).json()["registered_static_members"] == []

    r = await api.http.post(
        url, json={"group_instance_ids": ["n1", "n2"], "expansion_timeout_ms": 5000}
    )
    assert r.status_code == 200, r.text
    assert r.json()["registered_static_members"] == ["n1", "n2"]
    assert r.json()["state"] == "Stable", "registering alone does not rebalance"
    r = await api.http.post(url, json={"group_instance_ids": ["n2", "n3"]})
    assert r.status_code == 422 and "already registered" in detail(r) and "n2" in detail(r)
    # a group that does not exist yet: the registration creates it, Empty
    r = await api.http.post("/groups/fresh/static-members", json={"group_instance_ids": ["x"]})
    assert r.status_code == 200, r.text
    g = (await api.http.get("/groups/fresh")).json()
    assert (g["state"], g["members"], g["registered_static_members"]) == ("Empty", [], ["x"])
    await close_all(members)


async def test_registered_scale_up_is_one_rebalance_and_late_ones_are_dropped(api: Api) -> None:
    """The join phase waits for every registered instance (one generation for the batch);
    an instance that never comes is dropped when the expansion timeout expires."""
    old = await form_group(api.kafka_port, "scale", ["s0", "s1"])
    gen0 = old[0].generation
    r = await api.http.post(
        "/groups/scale/static-members",
        json={"group_instance_ids": ["n0", "n1"], "expansion_timeout_ms": 20_000},
    )
    assert r.status_code == 200, r.text
    new = [Member(await connect(api, f"new-{i}"), "scale", f"n{i}") for i in range(2)]
    first = asyncio.ensure_future(new[0].join())
    await eventually(lambda: api.node.partitions and _state(api, "scale") == "PreparingRebalance")
    rejoins = [asyncio.ensure_future(m.join()) for m in old]
    await asyncio.sleep(0.5)  # every current member is in: still held for n1
    assert not first.done() and not any(j.done() for j in rejoins)
    g = (await api.http.get("/groups/scale")).json()
    assert g["state"] == "PreparingRebalance" and g["registered_static_members"] == ["n1"]
    await new[1].join()
    await asyncio.gather(first, *rejoins)
    everyone = old + new
    assert {m.generation for m in everyone} == {gen0 + 1}, "one rebalance for the whole batch"
    leader = next(m for m in everyone if m.member_id == m.leader)
    plan = {k: assignment(v) for k, v in range_assign(leader.members, T6).items()}
    await asyncio.gather(*(m.sync(plan if m is leader else None) for m in everyone))
    g = (await api.http.get("/groups/scale")).json()
    assert (g["state"], g["generation"], len(g["members"])) == ("Stable", gen0 + 1, 4)
    assert g["registered_static_members"] == []

    # expiry: two registered, one arrives; the join completes when the timeout expires
    r = await api.http.post(
        "/groups/scale/static-members",
        json={"group_instance_ids": ["late-0", "late-1"], "expansion_timeout_ms": 1500},
    )
    assert r.status_code == 200
    late = Member(await connect(api, "late"), "scale", "late-0")
    joins = [asyncio.ensure_future(m.join()) for m in [late, *everyone]]
    t0 = asyncio.get_running_loop().time()
    await asyncio.gather(*joins)
    assert asyncio.get_running_loop().time() - t0 >= 1.0, "held until the timeout"
    g = (await api.http.get("/groups/scale")).json()
    assert g["generation"] == gen0 + 2 and len(g["members"]) == 5
    assert g["registered_static_members"] == [], "the missing one was dropped"
    await close_all([*everyone, late])


def _state(api: Api, group: str) -> str | None:
    for p in api.node.partitions.values():
        if p.core is not None and group in p.core.groups:
            return p.core.groups[group].state.value
    return None


async def test_remove_static_member_or_its_registration(api: Api) -> None:
    members = await form_group(api.kafka_port, "rm", ["s0", "s1"])
    s0, s1 = members
    gen = s0.generation
    r = await api.http.post("/groups/rm/static-members", json={"group_instance_ids": ["p1"]})
    assert r.status_code == 200
    # a pending registration is withdrawn; the group does not rebalance for it
    r = await api.http.delete("/groups/rm/static-members/p1")
    assert r.status_code == 204, r.text
    g = (await api.http.get("/groups/rm")).json()
    assert g["registered_static_members"] == [] and g["state"] == "Stable"
    # a member leaves as with LeaveGroup v3+ by instance id: the group rebalances without it
    r = await api.http.delete("/groups/rm/static-members/s1")
    assert r.status_code == 204, r.text
    g = (await api.http.get("/groups/rm")).json()
    assert g["state"] == "PreparingRebalance"
    assert [m["group_instance_id"] for m in g["members"]] == ["s0"]
    assert await s0.heartbeat() == REBALANCE_IN_PROGRESS
    await rebalance([s0], T6)
    g = (await api.http.get("/groups/rm")).json()
    assert (g["state"], g["generation"], len(g["members"])) == ("Stable", gen + 1, 1)
    assert g["members"][0]["assignment"]["partitions"] == [
        {"topic": "t6", "partitions": list(range(6))}
    ]
    # the removed member's old id is gone: its heartbeat is refused
    assert await s1.heartbeat() != 0
    for path, what in [
        ("/groups/rm/static-members/s1", "s1"),
        ("/groups/rm/static-members/nobody", "nobody"),
        ("/groups/missing/static-members/x", "missing"),
    ]:
        r = await api.http.delete(path)
        assert r.status_code == 404, (path, r.text)
        assert what in detail(r)
    await close_all(members)


# ==== forced rebalance ===========================================================================


async def test_forced_rebalance(api: Api) -> None:
    members = await form_group(api.kafka_port, "fr", [None, None])
    gen = members[0].generation
    r = await api.http.post("/groups/fr/rebalance", json={"reason": "maintenance"})
    assert r.status_code == 200, r.text
    assert r.json() == {"group_id": "fr", "result": "rebalance started"}
    g = (await api.http.get("/groups/fr")).json()
    assert g["state"] == "PreparingRebalance"
    assert g["rebalance_reason"] == "admin: maintenance"
    r = await api.http.post("/groups/fr/rebalance", json={"reason": "again"})
    assert r.status_code == 200 and r.json()["result"] == "already rebalancing"
    # members learn it from their next heartbeat and rejoin: one new generation
    assert [await m.heartbeat() for m in members] == [REBALANCE_IN_PROGRESS] * 2
    assert await rebalance(members, T6) == gen + 1
    assert (await api.http.get("/groups/fr")).json()["state"] == "Stable"
    # a body-less POST uses the default reason
    r = await api.http.post("/groups/fr/rebalance")
    assert r.status_code == 200, r.text
    assert (await api.http.get("/groups/fr")).json()["rebalance_reason"] == (
        "admin: requested by operator"
    )
    await rebalance(members, T6)

    # CompletingRebalance → PreparingRebalance: the parked SyncGroup is told to rejoin
    r = await api.http.post("/groups/fr/rebalance", json={"reason": "x"})
    assert r.status_code == 200
    await asyncio.gather(*(m.join() for m in members))
    assert (await api.http.get("/groups/fr")).json()["state"] == "CompletingRebalance"
    follower = next(m for m in members if m.member_id != m.leader)
    sync = asyncio.ensure_future(
        follower.client.sync_group("fr", follower.generation, follower.member_id)
    )
    await asyncio.sleep(0.1)
    r = await api.http.post("/groups/fr/rebalance", json={"reason": "during sync"})
    assert r.status_code == 200 and r.json()["result"] == "rebalance started"
    assert (await sync).error_code == REBALANCE_IN_PROGRESS
    assert (await api.http.get("/groups/fr")).json()["state"] == "PreparingRebalance"

    metrics = (await api.http.get("/metrics")).text
    # operator reasons share one label (bounded cardinality); the text is in the group record
    assert 'coordinator_rebalances_total{reason="admin"} 4.0' in metrics

    r = await api.http.post("/groups/fr/rebalance", json={"reason": "r" * 256})
    assert r.status_code == 422 and "reason" in detail(r)
    r = await api.http.post("/groups/nope/rebalance", json={"reason": "x"})
    assert r.status_code == 404 and detail(r)
    r = await api.http.post(
        "/groups/only-offsets/offsets",
        json={"offsets": [{"topic": "t6", "partition": 1, "offset": 3}]},
    )
    assert r.status_code == 200
    r = await api.http.post("/groups/only-offsets/rebalance", json={"reason": "x"})
    assert r.status_code == 409
    assert "Empty" in detail(r)
    await close_all(members)


# ==== delete =====================================================================================


async def test_delete_group(api: Api) -> None:
    members = await form_group(api.kafka_port, "del", [None])
    r = await api.http.delete("/groups/del")
    assert r.status_code == 409
    assert "members" in detail(r)
    r = await api.http.delete("/groups/never-was")
    assert r.status_code == 404 and "never-was" in detail(r)
    # once its last member left, the group (and its offsets) can be deleted
    m = members[0]
    await m.client.offset_commit(
        "del", {("t6", 2): 9}, generation_id=m.generation, member_id=m.member_id
    )
    leave = await m.client.leave_group("del", m.member_id)
    assert leave.error_code == 0
    g = (await api.http.get("/groups/del")).json()
    assert g["state"] == "Empty" and len(g["offsets"]) == 1
    r = await api.http.delete("/groups/del")
    assert r.status_code == 204 and r.content == b""
    assert (await api.http.get("/groups/del")).status_code == 404
    assert (await api.http.get("/groups/del/offsets")).status_code == 404
    fetched = await m.client.offset_fetch("del", [("t6", 2)])
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == -1
    assert (await api.http.delete("/groups/del")).status_code == 404
    await close_all(members)


# ==== offsets ====================================================================================


async def test_set_offsets_only_when_empty(api: Api) -> None:
    r = await api.http.post(
        "/groups/reset/offsets",
        json={
            "offsets": [
                {"topic": "t6", "partition": 3, "offset": 100},
                {"topic": "t1", "partition": 0, "offset": 5},
            ]
        },
    )
    assert r.status_code == 200, r.text
    assert [(o["topic"], o["partition"], o["offset"]) for o in r.json()] == [
        ("t1", 0, 5),
        ("t6", 3, 100),
    ]
    r = await api.http.get("/groups/reset/offsets")
    assert [(o["topic"], o["partition"], o["offset"]) for o in r.json()] == [
        ("t1", 0, 5),
        ("t6", 3, 100),
    ]
    # Kafka clients read what the admin set
    client = await connect(api, "reader")
    fetched = await client.offset_fetch("reset", [("t6", 3), ("t1", 0)])
    got = {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.groups[0].topics
        for p in t.partitions
    }
    assert got == {("t6", 3): 100, ("t1", 0): 5}
    await client.close()

    members = await form_group(api.kafka_port, "busy", [None])
    body = {"offsets": [{"topic": "t6", "partition": 0, "offset": 1}]}
    r = await api.http.post("/groups/busy/offsets", json=body)
    assert r.status_code == 409
    assert "Empty" in detail(r)
    bad: list[tuple[Any, str]] = [
        ({"offsets": [{"topic": "nope", "partition": 0, "offset": 1}]}, "unknown topic"),
        ({"offsets": [{"topic": "t1", "partition": 3, "offset": 1}]}, "t1-3"),
        ({"offsets": [{"topic": "t1", "partition": 0, "offset": -1}]}, "offset"),
        ({"offsets": [{"topic": "t1", "partition": -1, "offset": 1}]}, "partition"),
        ({"offsets": []}, "offsets"),
        ({}, "offsets"),
    ]
    for body, message in bad:
        r = await api.http.post("/groups/reset/offsets", json=body)
        assert r.status_code == 422, (body, r.text)
        assert message in detail(r), (body, r.text)
    # the member leaves: now the group is Empty and its offsets can be reset
    m = members[0]
    assert (await m.client.leave_group("busy", m.member_id)).error_code == 0
    r = await api.http.post(
        "/groups/busy/offsets", json={"offsets": [{"topic": "t6", "partition": 0, "offset": 11}]}
    )
    assert r.status_code == 200, r.text
    g = (await api.http.get("/groups/busy")).json()
    assert [(o["topic"], o["partition"], o["offset"]) for o in g["offsets"]] == [("t6", 0, 11)]
    await close_all(members)
