"""Moving live groups in from Apache Kafka's own coordinator and back out, through a gateway
node: the import of the upstream's committed offsets on first sight, the explicit import and
export commands, the mirror of every commit to the upstream (through an upstream outage), and
the one-group-one-coordinator check of a group split between the gateway and the brokers."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from tests.gateway.test_clients import (
    PARTITIONS,
    assemble,
    check_read_once,
    consume_to_end,
    log_ends,
    values,
    wait_stable,
)
from tests.support.java import consumer_groups, java_build  # noqa: F401 - java_build is a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.record_clients import RecordGroup, produce

pytestmark = pytest.mark.timeout(300)

N = 120
M = 60
FAST = {
    "COORD_UPSTREAM_CHECK_INTERVAL_MS": "500",
    "COORD_UPSTREAM_LAG_REFRESH_MS": "300",
    "COORD_OWNERSHIP_CHECK_INTERVAL_MS": "300",
}


def workdir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def cli(node: CoordinatorProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`coordinator ARGS...` against the node's admin API."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args, "--url", node.admin_url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def upstream_offsets(broker: KafkaBroker, group: str) -> dict[int, int]:
    """The group's committed offsets on the upstream's own coordinator (kafka-consumer-groups
    --describe against the brokers directly); {} while it has none."""
    out = consumer_groups(broker.bootstrap, "--describe", "--group", group, timeout=90)
    rows: dict[int, int] = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0] == group and cells[2].isdigit() and cells[3].isdigit():
            rows[int(cells[2])] = int(cells[3])
    return rows


def cluster_groups(node: CoordinatorProcess) -> dict[str, Any]:
    status: dict[str, Any] = node.get("/cluster")["upstream"]["groups"]
    return status


def direct_group_reads(
    client: str,
    broker: KafkaBroker,
    topic: str,
    group_id: str,
    tmp_path: Path,
    upto: int,
    static: bool | None = None,
) -> dict[int, int]:
    """A group consumes the topic's first `upto` records from the brokers directly, committing
    as it goes, and leaves: what the upstream's coordinator then holds for it."""
    where = workdir(tmp_path, "direct")
    with RecordGroup(client, where, broker.bootstrap, topic, group_id, static=static) as group:
        group.wait_assigned(PARTITIONS)
        ends = consume_to_end(group, broker, topic, values(0, upto))
        group.quit()
    return ends


# ==== moving in =================================================================================


@pytest.mark.parametrize("client", ["confluent", "java"])
def test_a_group_moved_to_the_gateway_resumes_at_its_upstream_commits(
    client: str,
    request: pytest.FixtureRequest,
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    if client == "java":
        request.getfixturevalue("java_build")
    group_id = f"{topic}-moved-{client}"
    produce("confluent", apache_kafka_broker.bootstrap, topic, 0, N)
    committed = direct_group_reads(client, apache_kafka_broker, topic, group_id, tmp_path, N)
    assert upstream_offsets(apache_kafka_broker, group_id) == committed
    produce("confluent", apache_kafka_broker.bootstrap, topic, N, M)  # while nobody consumes

    node = gateway_factory(**FAST)
    cluster_id = node.get("/cluster")["upstream"]["cluster_id"]
    with RecordGroup(client, workdir(tmp_path, "gw"), node.bootstrap, topic, group_id) as group:
        assemble(node, group)
        consume_to_end(group, apache_kafka_broker, topic, values(N, M))
        # exactly the records produced after the direct group's last commit: none read twice
        check_read_once(group, values(N, M))
        described = wait_stable(node, group_id, 3)
    assert {o["partition"]: o["offset"] for o in described["offsets"]} == log_ends(
        apache_kafka_broker, topic
    )
    status = cluster_groups(node)
    # static members that left the brokers stay live there until their session timeout:
    # the import waited for that (refused meanwhile), then took the positions once
    assert status["imports"]["imported"] == 1, status
    assert status["imported_offsets"] == PARTITIONS
    del cluster_id  # provenance is checked where nothing was committed since (next test)


def test_with_the_import_off_a_moved_group_starts_from_its_reset_policy(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    group_id = f"{topic}-off"
    produce("confluent", apache_kafka_broker.bootstrap, topic, 0, N)
    direct_group_reads("confluent", apache_kafka_broker, topic, group_id, tmp_path, N, static=False)
    node = gateway_factory(COORD_UPSTREAM_OFFSETS="off", **FAST)
    with RecordGroup("confluent", workdir(tmp_path, "gw"), node.bootstrap, topic, group_id) as g:
        assemble(node, g)
        consume_to_end(g, apache_kafka_broker, topic, values(0, N))
        check_read_once(g, values(0, N))  # from the earliest offset: nothing was taken
    assert cluster_groups(node)["imports"] == {}


def test_an_import_records_its_provenance_and_a_dry_run_changes_nothing(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    group_id = f"{topic}-explicit"
    produce("confluent", apache_kafka_broker.bootstrap, topic, 0, N)
    # dynamic members leave at once (static ones stay live upstream for their session timeout)
    committed = direct_group_reads(
        "confluent", apache_kafka_broker, topic, group_id, tmp_path, N, static=False
    )
    node = gateway_factory(**FAST)
    cluster_id = node.get("/cluster")["upstream"]["cluster_id"]

    dry = cli(node, "groups", "import", group_id, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    (plan,) = json.loads(dry.stdout)
    assert {o["partition"]: o["upstream_offset"] for o in plan["offsets"]} == committed
    assert {o["action"] for o in plan["offsets"]} == {"take"}
    assert all(g["group_id"] != group_id for g in node.get("/groups")), "a dry run wrote"

    done = cli(node, "groups", "import", group_id)
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout
    offsets = node.get(f"/groups/{group_id}/offsets")
    assert {o["partition"]: o["offset"] for o in offsets} == committed
    assert {(o["source"], o["origin"]) for o in offsets} == {("upstream", cluster_id)}
    again = cli(node, "groups", "import", group_id, "--json")  # nothing left to take
    assert {o["action"] for o in json.loads(again.stdout)[0]["offsets"]} == {"keep"}
    assert cluster_groups(node)["imported_offsets"] == PARTITIONS


# ==== one group, one coordinator ================================================================


def wait_refused(node: CoordinatorProcess, group_id: str, timeout: float = 30) -> str:
    """Until GET /groups/{id} says why the group's import waits; that reason."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(urllib.error.HTTPError):  # 404 until a consumer joins
            refused = node.get(f"/groups/{group_id}")["upstream"]["import_refused"]
            if refused:
                return str(refused)
        time.sleep(0.2)
    raise AssertionError(f"the import of {group_id} was never refused")


def test_a_group_split_between_the_gateway_and_the_brokers_is_refused_then_flagged(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    group_id = f"{topic}-split"
    produce("confluent", apache_kafka_broker.bootstrap, topic, 0, N)
    node = gateway_factory(**FAST)
    direct = RecordGroup(
        "confluent", workdir(tmp_path, "direct"), apache_kafka_broker.bootstrap, topic, group_id, 1
    )
    with direct:
        direct.wait_assigned(PARTITIONS)
        consume_to_end(direct, apache_kafka_broker, topic, values(0, N))
        with RecordGroup(
            "confluent", workdir(tmp_path, "gw"), node.bootstrap, topic, group_id, 1
        ) as moved:
            # the moved consumer joins here, but its positions wait for the direct one to leave
            refused = wait_refused(node, group_id)
            assert "live member" in refused, refused
            explicit = cli(node, "groups", "import", group_id)
            assert explicit.returncode != 0 and "live member" in explicit.stderr
            time.sleep(2)
            assert moved.records() == [], "the moved consumer read while the group was split"

            direct.quit()  # the last direct consumer leaves: the group moves in at its commits
            produce("confluent", apache_kafka_broker.bootstrap, topic, N, M)
            consume_to_end(moved, apache_kafka_broker, topic, values(N, M))
            check_read_once(moved, values(N, M))

            # a consumer that still bootstraps to the brokers shows up later: flagged
            late = RecordGroup(
                "confluent",
                workdir(tmp_path, "late"),
                apache_kafka_broker.bootstrap,
                topic,
                group_id,
                1,
            )
            with late:
                late.wait_assigned(PARTITIONS)
                deadline = time.monotonic() + 30
                flagged: dict[str, Any] = {}
                while time.monotonic() < deadline:
                    flagged = node.get(f"/groups/{group_id}")["upstream"]
                    if flagged["live_members_upstream"]:
                        break
                    time.sleep(0.2)
                assert len(flagged["live_members_upstream"]) == 1, flagged
                listed = {g["group_id"]: g for g in node.get("/groups")}
                assert listed[group_id]["upstream_members"] == 1
                metrics = node.metrics_text()
                assert f'coordinator_group_upstream_members{{group="{group_id}"}} 1.0' in metrics
                assert "has 1 live member(s) on the upstream's own coordinator" in node.log_text()


def test_consumers_of_the_new_protocol_on_the_brokers_also_hold_the_import(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    """A KIP-848 group upstream (group.protocol=consumer) is Dead to DescribeGroups: the
    check asks ConsumerGroupDescribe too."""
    group_id = f"{topic}-kip848"
    produce("confluent", apache_kafka_broker.bootstrap, topic, 0, N)
    node = gateway_factory(**FAST)
    direct = Consumer(
        {
            "bootstrap.servers": apache_kafka_broker.bootstrap,
            "group.id": group_id,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    closed = False
    try:
        direct.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 60
        while read < N and time.monotonic() < deadline:
            msg = direct.poll(0.2)
            if msg is not None and msg.error() is None:
                direct.commit(message=msg, asynchronous=False)
                read += 1
        assert read == N
        with RecordGroup(
            "confluent", workdir(tmp_path, "gw"), node.bootstrap, topic, group_id, 1
        ) as moved:
            refused = wait_refused(node, group_id)
            assert "live member" in refused, refused
            direct.close()  # a KIP-848 member leaves at once
            closed = True
            produce("confluent", apache_kafka_broker.bootstrap, topic, N, M)
            consume_to_end(moved, apache_kafka_broker, topic, values(N, M))
            check_read_once(moved, values(N, M))
    finally:
        if not closed:
            direct.close()
