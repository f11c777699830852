"""End-to-end: the admin API against unmodified confluent-kafka and kafka-python consumers, each
in its own OS process, on a `coordinator serve` process.

- a forced rebalance fires the consumers' rebalance callbacks (revoke, then assign);
- describe shows their group.instance.ids, client ids and decoded assignments;
- a topic grown by PATCH reaches their Metadata: the group's assignment grows to the new
  partitions through the clients' own metadata refresh.
"""

from __future__ import annotations

import warnings

import confluent_kafka  # noqa: F401  - a missing client library must fail the suite, not skip it
import pytest

with warnings.catch_warnings():  # kafka-python's protocol schemas use importlib.resources
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

from tests.api.e2e import Env, assignments

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_forced_rebalance_fires_the_callbacks_of_real_clients(e2e: Env) -> None:
    group = "ops"
    members = [
        e2e.consumer("confluent", group, "cf-static", instance="cf-static"),
        e2e.consumer("kafka-python", group, "kp-static", instance="kp-static"),
        e2e.consumer("confluent", group, "cf-dynamic"),
        e2e.consumer("kafka-python", group, "kp-dynamic"),
    ]
    g = e2e.wait_stable(group, members, "t6", 6)

    # describe: instance ids, client ids and hosts, decoded subscriptions and assignments
    by_client = {m["client_id"]: m for m in g["members"]}
    assert {k: v["group_instance_id"] for k, v in by_client.items()} == {
        "cf-static": "cf-static",
        "kp-static": "kp-static",
        "cf-dynamic": None,
        "kp-dynamic": None,
    }
    assert g["protocol_type"] == "consumer" and g["protocol_name"] == "range"
    assert sum(m["leader"] for m in g["members"]) == 1
    for c in members:
        d = by_client[c.name]
        assert d["client_host"] == "/127.0.0.1"
        assert d["session_timeout_ms"] == 10_000
        assert d["subscription"]["topics"] == ["t6"]
        assert isinstance(d["subscription"]["version"], int)
        assert d["assignment"]["partitions"] == [{"topic": "t6", "partitions": sorted(c.owned)}], (
            "the decoded assignment is what the client was given"
        )
    generation = g["generation"]

    marks = {c.name: c.mark() for c in members}
    r = e2e.api("POST", f"/groups/{group}/rebalance", {"reason": "e2e callbacks"})
    assert r["result"] == "rebalance started"

    def callbacks_fired() -> bool:
        for c in members:
            c.check_alive()
            kinds = [e["event"] for e in c.since(marks[c.name], "revoked", "assigned")]
            if "revoked" not in kinds or "assigned" not in kinds[kinds.index("revoked") :]:
                return False
        return True

    e2e.wait(callbacks_fired, "revoke and assign callbacks of every consumer", 60)
    g = e2e.wait_stable(group, members, "t6", 6)
    assert g["generation"] == generation + 1, "one forced rebalance, one generation"
    assert g["rebalance_reason"] == "admin: e2e callbacks"
    metrics = e2e.http.get(e2e.coord.admin_url + "/metrics").text
    assert 'coordinator_rebalances_total{reason="admin"} 1.0' in metrics
    # the static members kept their identity through it
    assert {m["group_instance_id"] for m in g["members"]} == {"cf-static", "kp-static", None}


def test_a_topic_grown_by_patch_reaches_the_clients_metadata(e2e: Env) -> None:
    group = "growers"
    members = [
        e2e.consumer("confluent", group, "cf-grow", topic="grow", instance="cf-grow"),
        e2e.consumer("kafka-python", group, "kp-grow", topic="grow", instance="kp-grow"),
    ]
    g = e2e.wait_stable(group, members, "grow", 2)
    assert sorted(len(p) for p in assignments(g, "grow").values()) == [1, 1]

    assert e2e.api("PATCH", "/topics/grow", {"partitions": 6}) == {"grow": 6}
    # nobody forces anything: the clients' metadata refresh sees 6 partitions and the group
    # rebalances over them (librdkafka rejoins on a partition-count change; a kafka-python
    # leader does on its next metadata refresh)
    g = e2e.wait_stable(group, members, "grow", 6, timeout=60)
    assert sorted(len(p) for p in assignments(g, "grow").values()) == [3, 3]

    # and once more through a forced rebalance right after the change
    assert e2e.api("PATCH", "/topics/grow", {"partitions": 8}) == {"grow": 8}
    e2e.api("POST", f"/groups/{group}/rebalance", {"reason": "picked up new partitions"})
    g = e2e.wait_stable(group, members, "grow", 8, timeout=60)
    assert sorted(len(p) for p in assignments(g, "grow").values()) == [4, 4]
