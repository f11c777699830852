"""Every client library through a gateway node in front of Apache Kafka's broker: real records
produced and consumed, the group coordinated here (never by the upstream's own coordinator),
surviving a kill -9 of the node, a SIGKILLed static member, a pre-registered scale-up and a
forced rebalance; and kafka-consumer-groups reading the real lag through the gateway.

The consumers are processes of tests/support/record_clients.py (one protocol for kafka-python,
aiokafka, confluent-kafka, kafkajs and the Java client): each commits the offsets after every
poll that returned records, synchronously. kafkajs has no static membership (no
group.instance.id): its group is dynamic.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.java import consumer_groups, java_build  # noqa: F401 - java_build is a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.record_clients import STATIC, RecordGroup, produce

pytestmark = pytest.mark.timeout(300)

N = 200  # records before the event under test
M = 90  # records after it
PARTITIONS = 3  # the `topic` fixture's


def values(start: int, count: int) -> list[str]:
    return [f"record-{i}" for i in range(start, start + count)]


def log_ends(broker: KafkaBroker, topic: str) -> dict[int, int]:
    """Each partition's log-end offset (high watermark), read from the upstream itself."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks-only"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def api(node: CoordinatorProcess, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        node.admin_url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def committed_offsets(node: CoordinatorProcess, group: str) -> dict[int, int]:
    """The group's committed offsets, as the node holds them (GET /groups/{id}/offsets)."""
    return {o["partition"]: o["offset"] for o in node.get(f"/groups/{group}/offsets")}


def wait_stable(
    node: CoordinatorProcess, group: str, members: int, timeout: float = 60, **want: Any
) -> dict[str, Any]:
    """GET /groups/{id} until the group is Stable with `members` members (and `want`'s fields)."""
    deadline = time.monotonic() + timeout
    g: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            g = node.get(f"/groups/{group}")
        except OSError:
            g = {}
        if (
            g.get("state") == "Stable"
            and len(g.get("members", [])) == members
            and all(g.get(k) == v for k, v in want.items())
        ):
            return g
        time.sleep(0.2)
    raise AssertionError(f"group {group} not Stable with {members} members {want}: {g}")


def upstream_never_heard_of(broker: KafkaBroker, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert group not in {g.group_id for g in listed.valid}, "the upstream coordinates the group"


def check_read_once(group: RecordGroup, want: list[str], marks: list[int] | None = None) -> None:
    """Every record of `want` read exactly once since `marks` (and nothing else)."""
    counts = Counter(v for _, _, v in group.records(marks))
    twice = sorted(v for v, n in counts.items() if n > 1)
    assert not twice, (
        f"{len(twice)} records read more than once, e.g. {twice[:5]}\n{group.describe()}"
    )
    assert set(counts) == set(want), (
        f"missing {sorted(set(want) - set(counts))[:5]}, unexpected "
        f"{sorted(set(counts) - set(want))[:5]}"
    )


def check_resumed_at(group: RecordGroup, marks: list[int], committed: dict[int, int]) -> None:
    """The first record each partition gave since `marks` is the one at its committed offset:
    nothing skipped, nothing committed read again."""
    first: dict[int, int] = {}
    for p, o, _ in group.records(marks):
        first[p] = min(first.get(p, o), o)
    assert first == {p: o for p, o in committed.items() if p in first}, (first, committed)
    assert set(first) == set(range(PARTITIONS)), f"partitions without new records: {first}"


def assemble(node: CoordinatorProcess, group: RecordGroup) -> None:
    """Until the group is Stable with all its members, each partition assigned once: records
    produced after it are read by their owner, not first by a member that joined early."""
    group.wait_assigned(PARTITIONS)
    wait_stable(node, group.group, len(group.members))


def consume_to_end(
    group: RecordGroup, broker: KafkaBroker, topic: str, want: list[str], timeout: float = 90
) -> dict[int, int]:
    ends = log_ends(broker, topic)
    group.wait_consumed(want, ends, timeout)
    return ends


# ==== 1. every client: a static group through a kill -9 of the coordinator ======================


CLIENTS = [
    "kafkajs",
    # make verify: test_records.py runs confluent-kafka's kill -9 in make test already,
    # tests/integration/test_real_clients.py the Python clients' coordinator kill, and
    # test_verifiable_faults.py the Java consumer's (Kafka's VerifiableConsumer)
    pytest.param("java", marks=pytest.mark.verify),
    pytest.param("kafka-python", marks=pytest.mark.verify),
    pytest.param("aiokafka", marks=pytest.mark.verify),
    pytest.param("confluent", marks=pytest.mark.verify),
]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_group_of_each_client_resumes_at_its_commits_after_a_kill_9(
    client: str,
    request: pytest.FixtureRequest,
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    if client == "java":
        request.getfixturevalue("java_build")
    node = gateway_factory()
    group_id = f"{topic}-{client}"
    with RecordGroup(client, tmp_path, node.bootstrap, topic, group_id) as group:
        assemble(node, group)
        produce(client, node.bootstrap, topic, 0, N)
        ends = consume_to_end(group, apache_kafka_broker, topic, values(0, N))
        assert sum(ends.values()) == N
        before = wait_stable(node, group_id, 3)
        if STATIC[client]:
            assert sorted(m["group_instance_id"] for m in before["members"]) == [
                f"{group_id}-w{i}" for i in range(3)
            ]
        committed = committed_offsets(node, group_id)
        assert committed == ends
        marks = group.marks()

        node.kill()
        node.start()  # the same database and ports
        produce(client, node.bootstrap, topic, N, M)
        consume_to_end(group, apache_kafka_broker, topic, values(0, N + M))

        check_read_once(group, values(0, N + M))
        check_resumed_at(group, marks, committed)
        assert committed_offsets(node, group_id) == log_ends(apache_kafka_broker, topic)
        assert all(c.alive for c in group.members), group.describe()
    upstream_never_heard_of(apache_kafka_broker, group_id)


# ==== 2. kafka-consumer-groups: the real log-end offsets and lag =================================


def describe_offsets(node: CoordinatorProcess, group: str) -> dict[int, dict[str, str]]:
    """kafka-consumer-groups --describe through the gateway: its rows by partition."""
    out = consumer_groups(node.bootstrap, "--describe", "--group", group, timeout=90)
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("Warn")]
    heads = [i for i, ln in enumerate(lines) if ln.split()[:2] == ["GROUP", "TOPIC"]]
    assert heads, f"no table in kafka-consumer-groups' output:\n{out}"
    start = heads[0]
    header = lines[start].split()
    rows = [dict(zip(header, ln.split(), strict=True)) for ln in lines[start + 1 :]]
    return {int(r["PARTITION"]): r for r in rows if r["GROUP"] == group}


def test_kafka_consumer_groups_shows_the_real_log_end_offsets_and_lag(
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group_id = f"{topic}-kcg"
    with RecordGroup("confluent", tmp_path, node.bootstrap, topic, group_id, static=False) as group:
        assemble(node, group)
        produce("confluent", node.bootstrap, topic, 0, N)
        ends = consume_to_end(group, apache_kafka_broker, topic, values(0, N))
        wait_stable(node, group_id, 3)
        rows = describe_offsets(node, group_id)
        assert set(rows) == set(range(PARTITIONS)), rows
        for p, r in rows.items():
            assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == (
                str(ends[p]),
                str(ends[p]),
                "0",
            ), r
            assert r["CONSUMER-ID"] != "-", r  # the active member that owns it
        group.quit()  # dynamic members leave: the group is Empty, its offsets stay
    produce("confluent", node.bootstrap, topic, N, M)
    later = log_ends(apache_kafka_broker, topic)
    rows = describe_offsets(node, group_id)
    assert {p: int(r["LOG-END-OFFSET"]) for p, r in rows.items()} == later
    assert {p: int(r["CURRENT-OFFSET"]) for p, r in rows.items()} == ends
    assert {p: int(r["LAG"]) for p, r in rows.items()} == {p: later[p] - ends[p] for p in later}
    assert sum(int(r["LAG"]) for r in rows.values()) == M


# ==== 3. a static member SIGKILLed and back within its session timeout ===========================


def test_a_static_member_killed_and_restarted_in_its_session_timeout_causes_no_rebalance(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group_id = f"{topic}-static"
    with RecordGroup(
        "confluent", tmp_path, node.bootstrap, topic, group_id, session_timeout_ms=30_000
    ) as group:
        assemble(node, group)
        produce("confluent", node.bootstrap, topic, 0, N)
        consume_to_end(group, apache_kafka_broker, topic, values(0, N))
        before = wait_stable(node, group_id, 3)
        committed = committed_offsets(node, group_id)
        # a follower (a static leader's return is a rebalance of its own in some clients)
        victim_instance = next(m["group_instance_id"] for m in before["members"] if not m["leader"])
        victim = next(c for c in group.members if c.instance == victim_instance)
        others = [c for c in group.members if c is not victim]
        owned_before = victim.since(0, "assigned")[-1]["partitions"]
        marks = group.marks()

        victim.kill()  # SIGKILL: no LeaveGroup, no close
        produce("confluent", node.bootstrap, topic, N, M)  # the others read theirs meanwhile
        victim.start()  # the same group.instance.id, well within session.timeout.ms
        consume_to_end(group, apache_kafka_broker, topic, values(0, N + M))

        after = wait_stable(node, group_id, 3)
        assert after["generation"] == before["generation"], (before, after)
        for c in others:
            moves = c.since(marks[group.members.index(c)], "assigned", "revoked")
            assert moves == [], f"{c.name} saw a rebalance: {moves}"
        (back,) = victim.since(marks[group.members.index(victim)], "assigned")
        assert back["partitions"] == owned_before
        check_read_once(group, values(N, M), marks)
        check_resumed_at(group, marks, committed)
        # the restarted member read what was produced on its partitions while it was dead
        since = marks[group.members.index(victim)]
        its = {v for e in victim.since(since, "records") for _, _, v in e["records"]}
        assert its and its == {v for p, _, v in group.records(marks) if p in owned_before}
    upstream_never_heard_of(apache_kafka_broker, group_id)


# ==== 4. a pre-registered scale-up, then a forced rebalance, on real records =====================


def test_pre_registered_members_and_a_forced_rebalance_consume_from_the_commits(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group_id = f"{topic}-prereg"
    instances = [f"{group_id}-w{i}" for i in range(3)]
    registered = api(
        node,
        "POST",
        f"/groups/{group_id}/static-members",
        {"group_instance_ids": instances, "expansion_timeout_ms": 20_000},
    )
    assert sorted(registered["registered_static_members"]) == instances
    produce("confluent", node.bootstrap, topic, 0, N)
    with RecordGroup("confluent", tmp_path, node.bootstrap, topic, group_id, size=0) as group:
        # the members arrive 1.5 s apart (the initial rebalance delay is 300 ms): the
        # registration holds the join phase open until the last, one rebalance for all three
        for i in range(3):
            time.sleep(1.5 if i else 0)
            assert group.add().instance == instances[i]
        consume_to_end(group, apache_kafka_broker, topic, values(0, N))
        first = wait_stable(node, group_id, 3)
        assert first["generation"] == 1 and first["registered_static_members"] == [], first
        for c in group.members:
            assert len(c.since(0, "assigned")) == 1 and c.since(0, "revoked") == [], c.describe()
        committed = committed_offsets(node, group_id)
        marks = group.marks()

        forced = api(node, "POST", f"/groups/{group_id}/rebalance", {"reason": "test"})
        assert forced is not None
        second = wait_stable(node, group_id, 3, generation=first["generation"] + 1)
        group.wait_assigned(PARTITIONS, marks=marks)
        for c, m in zip(group.members, marks, strict=True):
            assert c.since(m, "revoked"), f"{c.name} never revoked\n{c.describe()}"
        assert second["rebalance_reason"] is None or "test" in second["rebalance_reason"]
        produce("confluent", node.bootstrap, topic, N, M)
        consume_to_end(group, apache_kafka_broker, topic, values(0, N + M))
        check_read_once(group, values(0, N + M))
        check_resumed_at(group, marks, committed)
        assert wait_stable(node, group_id, 3)["generation"] == second["generation"]
    upstream_never_heard_of(apache_kafka_broker, group_id)
