"""Bearer-token auth on every endpoint, the JSON shape of every error, and the redirect to the
node that owns a group (two nodes on one SQLite file, each with its admin app on its port)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from app.runtime.placement import partition_for
from tests.api.helpers import Api, ClusterNode, eventually, run_cli, two_nodes
from tests.api.test_groups import detail

OPEN = {"/healthz", "/readyz", "/metrics"}  # never need the token (probes, scrapers)

BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/groups/{group_id}/static-members"): {"group_instance_ids": ["i"]},
    ("POST", "/groups/{group_id}/rebalance"): {"reason": "auth"},
    ("POST", "/groups/{group_id}/offsets"): {
        "offsets": [{"topic": "t1", "partition": 0, "offset": 1}]
    },
    ("POST", "/topics"): {"name": "auth-topic", "partitions": 1},
    ("PATCH", "/topics/{name}"): {"partitions": 4},
    ("PUT", "/users/{name}"): {"password": "pw-of-t1"},
    ("POST", "/acls"): [
        {"resource_type": "GROUP", "resource_name": "g", "principal": "User:x", "operation": "READ"}
    ],
    ("DELETE", "/acls"): {"principal": "User:x"},
}


def operations(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: {"name": "t1"}.get(m.group(1), "g"), path)


async def test_every_endpoint_but_probes_needs_the_bearer_token(secured: Api) -> None:
    http = secured.http
    spec = (await http.get("/openapi.json")).json()
    ops = operations(spec)
    assert len(ops) == 26, ops  # every endpoint of the issues is in the schema
    for method, path in ops:
        url = concrete(path)
        body = BODIES.get((method, path))
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Bearer s3cre"},  # a prefix of the right one
            {"Authorization": "Bearer s3cret-and-more"},
            {"Authorization": "Basic czNjcmV0"},
            {"Authorization": "s3cret"},
        ):
            r = await http.request(method, url, json=body, headers=headers)
            if path in OPEN:
                assert r.status_code in (200, 503), (method, path, headers, r.status_code)
                continue
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
            assert "token" in detail(r)
            assert r.headers["www-authenticate"].startswith("Bearer")
        r = await http.request(method, url, json=body, headers=secured.auth())
        assert r.status_code not in (401, 403), (method, path, r.text)
        assert r.status_code < 500, (method, path, r.text)
    # the docs are public (they hold no data)
    assert (await http.get("/docs")).status_code == 200


async def test_errors_are_json_with_a_human_detail(api: Api) -> None:
    http = api.http
    cases = [
        ("GET", "/no/such/path", None, 404),
        ("PUT", "/topics", None, 405),
        ("DELETE", "/cluster", None, 405),
        ("POST", "/topics", b"{not json", 422),
        ("POST", "/topics", b"[1, 2]", 422),
        ("POST", "/groups/g/offsets", b'{"offsets": "all"}', 422),
        ("PATCH", "/topics/t1", b'{"partitions": "many"}', 422),
        ("GET", "/groups?state=" + "x" * 300, None, 422),
    ]
    for method, path, raw, status in cases:
        headers = {"content-type": "application/json"} if raw is not None else {}
        r = await http.request(method, path, content=raw, headers=headers)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        text = detail(r)
        assert "Traceback" not in text
    # validation messages name the field
    r = await http.patch("/topics/t1", json={"partitions": "many"})
    assert detail(r).startswith("body.partitions:"), r.text


# ==== two nodes: redirect to the owner ============================================================


def owned_group(node: ClusterNode, prefix: str) -> str:
    for i in range(1000):
        g = f"{prefix}-{i}"
        if partition_for(g, node.node.log_partitions) in node.node.partitions:
            return g
    raise AssertionError("no group id maps to the node's partitions")


async def settled(a: ClusterNode, b: ClusterNode) -> None:
    def ok() -> bool:
        na, nb = a.node, b.node
        if not (na.partitions and nb.partitions and na.ready() and nb.ready()):
            return False
        if set(na.partitions) & set(nb.partitions) or len(na.partitions) + len(nb.partitions) != 9:
            return False
        if set(na.admin_urls) != {1, 2} or set(nb.admin_urls) != {1, 2}:
            return False
        # and the placement is done: both plan what is (no handover under way)
        return all(
            x.node.owner_of(pid) == x.node.plan.get(pid) == (1 if pid in na.partitions else 2)
            for x in (a, b)
            for pid in range(-1, 8)
        )

    await eventually(ok, 30, "two nodes with agreed owners")


async def test_a_call_about_another_nodes_group_is_redirected_and_the_cli_follows(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b):
        await settled(a, b)
        g_b = owned_group(b, "on-b")
        g_a = owned_group(a, "on-a")
        json_type = {"Content-Type": "application/json"}  # every mutation says so
        async with httpx.AsyncClient(timeout=30, headers=json_type) as http:
            # create a group on b through a: POST is redirected with its body (307)
            body = {"offsets": [{"topic": "t6", "partition": 2, "offset": 17}]}
            r = await http.post(f"{a.url}/groups/{g_b}/offsets", json=body)
            assert r.status_code == 307
            assert r.headers["location"] == f"{b.url}/groups/{g_b}/offsets"
            r = await http.post(f"{a.url}/groups/{g_b}/offsets", json=body, follow_redirects=True)
            assert r.status_code == 200, r.text
            assert r.json()[0]["offset"] == 17
            assert str(r.url) == f"{b.url}/groups/{g_b}/offsets"
            r = await http.post(f"{b.url}/groups/{g_a}/offsets", json=body, follow_redirects=True)
            assert r.status_code == 200, r.text
            # every group endpoint redirects, with the query kept
            for method, path, json_body in [
                ("GET", f"/groups/{g_b}", None),
                ("GET", f"/groups/{g_b}/offsets?x=1", None),
                ("DELETE", f"/groups/{g_b}/static-members/i", None),
                ("POST", f"/groups/{g_b}/rebalance", None),
                ("POST", f"/groups/{g_b}/static-members", {"group_instance_ids": ["i"]}),
                ("POST", f"/groups/{g_b}/offsets", body),
                ("DELETE", f"/groups/{g_b}", None),
            ]:
                r = await http.request(method, a.url + path, json=json_body)
                assert r.status_code == 307, (method, path, r.text)
                assert r.headers["location"] == b.url + path
            r = await http.get(f"{a.url}/groups/{g_b}", follow_redirects=True)
            assert r.status_code == 200 and r.json()["offsets"][0]["offset"] == 17
            # /cluster on either node: both nodes, every partition with its owner and epoch
            for n in (a, b):
                c = (await http.get(f"{n.url}/cluster")).json()
                assert {x["node_id"]: x["admin_url"] for x in c["nodes"]} == {1: a.url, 2: b.url}
                assert sum(x["partitions"] for x in c["nodes"]) == 9
                for p in c["partitions"]:
                    owner = a if p["partition"] in a.node.partitions else b
                    assert p["owner"] == p["planned_owner"] == owner.node.node_id, p
                    assert p["epoch"] >= 1 and p["lease_expires_in_ms"] is not None, p
                    mine = owner is n
                    assert (p["state"] == "active") if mine else (p["state"] is None), p
            # the group list is the cluster's, from either node
            for n in (a, b):
                r = await http.get(f"{n.url}/groups")
                assert r.status_code == 200
                assert {x["group_id"] for x in r.json()} == {g_a, g_b}
                r = await http.get(f"{n.url}/groups", params={"state": "Stable"})
                assert r.json() == []
            # topics are written by the owner of the registry (partition -1)
            other = a if -1 in b.node.partitions else b
            owner = b if other is a else a
            r = await http.post(f"{other.url}/topics", json={"name": "new", "partitions": 2})
            assert r.status_code == 307 and r.headers["location"] == f"{owner.url}/topics"
            r = await http.post(
                f"{other.url}/topics", json={"name": "new", "partitions": 2}, follow_redirects=True
            )
            assert r.status_code == 201, r.text
            await eventually(lambda: other.node.topics.get("new") == 2, 10, "topic replicated")

        # the CLI follows the redirect
        res = await run_cli("groups", "describe", g_b, "--json", url=a.url)
        assert res.code == 0, res.stderr
        assert json.loads(res.stdout)["group_id"] == g_b
        res = await run_cli("groups", "offsets", g_b, "--set", "t6:3=5", "--json", url=a.url)
        assert res.code == 0, res.stderr
        assert {(o["partition"], o["offset"]) for o in json.loads(res.stdout)} == {(2, 17), (3, 5)}


async def test_redirect_keeps_the_token_for_the_cli_and_the_cluster_wide_list(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path, token="tok") as (a, b):
        await settled(a, b)
        g_b = owned_group(b, "sec-b")
        auth = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
        async with httpx.AsyncClient(timeout=30, headers=auth) as http:
            r = await http.post(
                f"{b.url}/groups/{g_b}/static-members", json={"group_instance_ids": ["x1"]}
            )
            assert r.status_code == 200, r.text
            r = await http.get(f"{a.url}/groups/{g_b}")
            assert r.status_code == 307
            r = await http.get(f"{a.url}/groups")  # a asks b with the token
            assert [x["group_id"] for x in r.json()] == [g_b]
            r = await http.get(f"{a.url}/groups", headers={"Authorization": "Bearer no"})
            assert r.status_code == 401
        res = await run_cli("groups", "describe", g_b, "--json", url=a.url, token="tok")
        assert res.code == 0, res.stderr
        assert json.loads(res.stdout)["registered_static_members"] == ["x1"]
        res = await run_cli("groups", "remove-member", g_b, "x1", url=a.url, token="tok")
        assert res.code == 0, res.stderr
        res = await run_cli("groups", "describe", g_b, url=a.url, token="wrong")
        assert res.code == 1 and "401" in res.stderr and "token" in res.stderr
