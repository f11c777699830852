"""Leaving the gateway without losing a position: COORD_UPSTREAM_OFFSETS=mirror writes every
commit to the upstream's __consumer_offsets in the background (through an upstream outage,
which delays it and fails no commit here), and `coordinator groups export --to-upstream`
writes an Empty group's positions back, so consumers pointed at the brokers again resume
there."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gateway.conftest import gateway_process
from tests.gateway.test_clients import (
    PARTITIONS,
    api,
    assemble,
    check_read_once,
    consume_to_end,
    log_ends,
    values,
)
from tests.gateway.test_moves import cli, upstream_offsets, workdir
from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.record_clients import RecordGroup, produce

pytestmark = pytest.mark.timeout(300)

N = 120
M = 60
OUTAGE_S = 15
MIRROR_MS = 200


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """An upstream of this module's own: the mirror test stops it."""
    broker = KafkaBroker(tmp_path_factory.mktemp("mirror-kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def metric(node: CoordinatorProcess, name: str) -> float:
    for line in node.metrics_text().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "_total "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def wait_upstream(broker: KafkaBroker, group: str, want: dict[int, int], timeout: float) -> float:
    """Until the upstream's coordinator holds `want` for the group; the seconds it took."""
    start = time.monotonic()
    got: dict[int, int] = {}
    while time.monotonic() - start < timeout:
        got = upstream_offsets(broker, group)
        if got == want:
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"upstream holds {got} for {group}, not {want}, after {timeout} s")


def test_every_commit_is_mirrored_upstream_and_an_outage_only_delays_it(
    java_build: None,  # noqa: F811 - kafka-consumer-groups runs on the Java build's classpath
    own_broker: KafkaBroker,
    tmp_path: Path,
) -> None:
    topic = f"mirror-{uuid.uuid4().hex[:8]}"
    own_broker.create_topic(topic, PARTITIONS)
    node = gateway_process(
        tmp_path / "gw",
        own_broker,
        COORD_UPSTREAM_OFFSETS="mirror",
        COORD_UPSTREAM_MIRROR_INTERVAL_MS=str(MIRROR_MS),
        COORD_UPSTREAM_TIMEOUT_MS="2000",
    )
    node.start()
    try:
        group_id = f"{topic}-g"
        where = workdir(tmp_path, "c")  # dynamic members: they leave at once when they quit
        with RecordGroup("confluent", where, node.bootstrap, topic, group_id, static=False) as g:
            assemble(node, g)
            produce("confluent", node.bootstrap, topic, 0, N)
            ends = consume_to_end(g, own_broker, topic, values(0, N))
            # what an upstream-side lag monitor reads, within the documented bound
            wait_upstream(own_broker, group_id, ends, timeout=30)
            g.quit()

        own_broker.stop()
        outage_start = time.monotonic()
        rewound = {p: 7 for p in range(PARTITIONS)}  # an operator's reset, accepted here
        offsets = [{"topic": topic, "partition": p, "offset": o} for p, o in rewound.items()]
        done = api(node, "POST", f"/groups/{group_id}/offsets", {"offsets": offsets})
        assert {o["partition"]: o["offset"] for o in done} == rewound
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_start)))
        assert metric(node, "coordinator_upstream_mirror_lag_seconds") > OUTAGE_S / 2
        assert metric(node, "coordinator_upstream_mirror_errors") > 0
        committed = node.get(f"/groups/{group_id}/offsets")
        assert {o["partition"]: o["offset"] for o in committed} == rewound, "a commit was lost"

        own_broker.resume()  # the same log dir: the upstream comes back with its state
        wait_upstream(own_broker, group_id, rewound, timeout=60)
        deadline = time.monotonic() + 10
        while (
            metric(node, "coordinator_upstream_mirror_lag_seconds") and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert metric(node, "coordinator_upstream_mirror_lag_seconds") == 0
    finally:
        node.kill()
        if not own_broker.running:
            own_broker.resume()


def test_an_exported_group_resumes_at_the_gateways_positions_on_the_brokers(
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group_id = f"{topic}-leaving"
    produce("confluent", node.bootstrap, topic, 0, N)
    where = workdir(tmp_path, "gw")  # dynamic members: they leave at once when they quit
    with RecordGroup("confluent", where, node.bootstrap, topic, group_id, static=False) as g:
        assemble(node, g)
        ends = consume_to_end(g, apache_kafka_broker, topic, values(0, N))
        refused = cli(node, "groups", "export", group_id, "--to-upstream")
        assert refused.returncode != 0 and "member" in refused.stderr, refused
        g.quit()
    assert upstream_offsets(apache_kafka_broker, group_id) == {}  # nothing went upstream

    dry = cli(node, "groups", "export", group_id, "--to-upstream", "--dry-run")
    assert dry.returncode == 0 and "would write 3" in dry.stdout, dry
    assert upstream_offsets(apache_kafka_broker, group_id) == {}
    done = cli(node, "groups", "export", group_id, "--to-upstream")
    assert done.returncode == 0, done.stderr
    assert upstream_offsets(apache_kafka_broker, group_id) == ends
    # moved out: nothing of it stays here, so a return imports the positions reached upstream
    assert all(g["group_id"] != group_id for g in node.get("/groups"))

    produce("confluent", apache_kafka_broker.bootstrap, topic, N, M)
    direct = workdir(tmp_path, "direct")
    with RecordGroup("confluent", direct, apache_kafka_broker.bootstrap, topic, group_id) as g:
        g.wait_assigned(PARTITIONS)
        consume_to_end(g, apache_kafka_broker, topic, values(N, M))
        check_read_once(g, values(N, M))
    assert upstream_offsets(apache_kafka_broker, group_id) == log_ends(apache_kafka_broker, topic)
