"""/topics, /cluster, /healthz, /readyz and /metrics against a real node."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from app.runtime.placement import partition_for
from app.runtime.runtime import PartitionState
from tests.api.helpers import Api, close_all, form_group, served_node
from tests.api.test_groups import detail
from tests.support.kafka_client import KafkaTestClient


async def metadata_topics(api: Api) -> dict[str, int]:
    client = await KafkaTestClient.connect("127.0.0.1", api.kafka_port, client_id="md")
    try:
        md = await client.metadata()
        return {t.name: len(t.partitions) for t in md.topics if t.error_code == 0}
    finally:
        await client.close()


# ==== topics =====================================================================================


async def test_topics_create_grow_and_errors(tmp_path: Path) -> None:
    async with served_node(tmp_path) as api:
        r = await api.http.get("/topics")
        assert r.status_code == 200 and r.json() == {"t1": 3, "t6": 6}

        r = await api.http.post("/topics", json={"name": "orders.v1", "partitions": 4})
        assert r.status_code == 201, r.text
        assert r.json() == {"orders.v1": 4}
        assert (await metadata_topics(api))["orders.v1"] == 4, "visible in Metadata at once"

        r = await api.http.post("/topics", json={"name": "orders.v1", "partitions": 9})
        assert r.status_code == 409 and "already exists" in detail(r)
        for body, what in [
            ({"name": "bad name!", "partitions": 1}, "name"),
            ({"name": "", "partitions": 1}, "name"),
            ({"name": "x" * 250, "partitions": 1}, "name"),
            ({"name": "ok", "partitions": 0}, "partitions"),
            ({"name": "ok"}, "partitions"),
            ({"partitions": 1}, "name"),
        ]:
            r = await api.http.post("/topics", json=body)
            assert r.status_code == 422, (body, r.text)
            assert what in detail(r), (body, r.text)

        r = await api.http.patch("/topics/orders.v1", json={"partitions": 8})
        assert r.status_code == 200 and r.json() == {"orders.v1": 8}
        assert (await metadata_topics(api))["orders.v1"] == 8, "growth visible at once"
        r = await api.http.patch("/topics/orders.v1", json={"partitions": 8})
        assert r.status_code == 200 and r.json() == {"orders.v1": 8}, "same count: no-op"
        r = await api.http.patch("/topics/orders.v1", json={"partitions": 2})
        assert r.status_code == 422 and "only grow" in detail(r)
        r = await api.http.patch("/topics/nope", json={"partitions": 2})
        assert r.status_code == 404 and "nope" in detail(r)
        r = await api.http.patch("/topics/orders.v1", json={"partitions": 0})
        assert r.status_code == 422 and detail(r)
        r = await api.http.get("/topics")
        assert r.json() == {"orders.v1": 8, "t1": 3, "t6": 6}

    # persisted: a node restarted on the same database still has them
    async with served_node(tmp_path) as api:
        assert (await api.http.get("/topics")).json() == {"orders.v1": 8, "t1": 3, "t6": 6}
        assert (await metadata_topics(api))["orders.v1"] == 8


# ==== cluster and health =========================================================================


async def test_cluster_healthz_readyz(api: Api) -> None:
    r = await api.http.get("/cluster")
    assert r.status_code == 200
    c = r.json()
    assert c["node_id"] == 1 and c["ready"] is True
    assert c["topics"] == {"t1": 3, "t6": 6}
    assert [n["node_id"] for n in c["nodes"]] == [1]
    assert c["nodes"][0]["admin_url"] == api.url
    assert c["nodes"][0]["partitions"] == 5
    parts = {p["partition"]: p for p in c["partitions"]}
    assert sorted(parts) == [-1, 0, 1, 2, 3], "the topic registry and every log partition"
    for p in parts.values():
        assert p["owner"] == 1 and p["planned_owner"] == 1
        assert p["epoch"] >= 1 and p["state"] == "active"
        assert p["lease_expires_in_ms"] > 0
        assert isinstance(p["records_loaded"], int) and p["load_ms"] >= 0

    r = await api.http.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "node_id": 1}
    r = await api.http.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {
        "ready": True,
        "owned": [-1, 0, 1, 2, 3],
        "loading": [],
        "load_errors": {},
        "storage_error": None,
    }

    # a partition that is (again) loading: not ready, and its groups answer 503, not 500
    members = await form_group(api.kafka_port, "g", [None])
    pid = partition_for("g", api.node.log_partitions)
    p = api.node.partitions[pid]
    p.state = PartitionState.LOADING
    try:
        r = await api.http.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {
            "ready": False,
            "owned": [-1, 0, 1, 2, 3],
            "loading": [pid],
            "load_errors": {},
            "storage_error": None,
        }
        assert (await api.http.get("/healthz")).status_code == 200, "alive while loading"
        r = await api.http.get("/groups/g")
        assert r.status_code == 503 and "loading" in detail(r)
        states = {
            x["partition"]: x["state"]
            for x in (await api.http.get("/cluster")).json()["partitions"]
        }
        assert states[pid] == "loading"
    finally:
        p.state = PartitionState.ACTIVE
    assert (await api.http.get("/readyz")).status_code == 200
    await close_all(members)


# ==== metrics ====================================================================================


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_metrics_prometheus_families(api: Api) -> None:
    members = await form_group(api.kafka_port, "m1", [None, "s"])
    await form_group(api.kafka_port, "m2", [None])
    r = await api.http.post("/groups/m2/rebalance", json={"reason": "metrics"})
    assert r.status_code == 200
    r = await api.http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    fams = families(r.text)

    def samples(name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        f = fams[name]
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}  # type: ignore[attr-defined]

    def kind(name: str) -> str:
        return fams[name].type  # type: ignore[attr-defined,no-any-return]

    assert kind("coordinator_groups") == "gauge"
    assert samples("coordinator_groups") == {
        ("coordinator_groups", (("state", "PreparingRebalance"),)): 1.0,
        ("coordinator_groups", (("state", "Stable"),)): 1.0,
    }
    assert samples("coordinator_members") == {("coordinator_members", ()): 3.0}
    assert kind("coordinator_rebalances") == "counter"
    rebalances = samples("coordinator_rebalances")
    assert rebalances[("coordinator_rebalances_total", (("reason", "admin"),))] == 1
    assert rebalances[("coordinator_rebalances_total", (("reason", "member joined"),))] >= 2
    for name in ("coordinator_join_group_seconds", "coordinator_sync_group_seconds"):
        assert kind(name) == "histogram"
        s = samples(name)
        assert s[(f"{name}_count", ())] >= 3, name
        assert s[(f"{name}_bucket", (("le", "+Inf"),))] == s[(f"{name}_count", ())]
    assert kind("coordinator_append_batch_records") == "histogram"
    assert (
        samples("coordinator_append_batch_records")[("coordinator_append_batch_records_count", ())]
        >= 1
    )
    assert samples("coordinator_append_seconds")[("coordinator_append_seconds_count", ())] >= 1
    loads = samples("coordinator_partition_load_seconds")
    assert loads[("coordinator_partition_load_seconds_count", ())] == 4, "one per log partition"
    assert kind("coordinator_lease_changes") == "counter"
    assert samples("coordinator_lease_changes")[("coordinator_lease_changes_total", ())] == 5
    assert samples("coordinator_partitions") == {
        ("coordinator_partitions", (("state", "active"),)): 5.0
    }
    await close_all(members)


async def test_metrics_count_kafka_requests_by_api_version_and_error(api: Api) -> None:
    members = await form_group(api.kafka_port, "req", [None])
    assert await members[0].client.heartbeat("req", 99, "nobody") is not None  # an error
    fams = families((await api.http.get("/metrics")).text)
    assert fams["coordinator_requests"].type == "counter"  # type: ignore[attr-defined]
    counts = {
        (s.labels["api"], s.labels["version"], s.labels["error"]): s.value
        for s in fams["coordinator_requests"].samples  # type: ignore[attr-defined]
        if s.name == "coordinator_requests_total"
    }
    assert counts[("JoinGroup", "9", "79")] == 1, counts  # MEMBER_ID_REQUIRED first
    assert counts[("JoinGroup", "9", "0")] == 1, counts
    assert counts[("SyncGroup", "5", "0")] == 1, counts
    assert counts[("Heartbeat", "4", "25")] == 1, counts  # UNKNOWN_MEMBER_ID
    await close_all(members)
