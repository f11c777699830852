"""Kafka's VerifiableProducer and VerifiableConsumers through a gateway node while the upstream
moves under it: a three-broker Apache Kafka cluster (replication factor 3, min.insync.replicas
2) restarts a broker and moves partition leaders. Every acked record is consumed, commits never
go back, nothing is skipped past a commit, no partition is owned twice, and the static group is
not rebalanced by anything that happens upstream (the group lives on the gateway, not there).
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest

from tests.gateway.conftest import gateway_process
from tests.gateway.verify_stack import seed_for
from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaCluster
from tests.support.verifiable import (
    assignments_since,
    consumer,
    finish,
    group_view,
    producer,
    settled,
    verdict,
    wait,
)

pytestmark = [pytest.mark.verify, pytest.mark.timeout(420)]  # make test has
# test_upstream_faults.py's broker restart and leader move

RECORDS = 4000
RATE = 200
PARTITIONS = 3


@pytest.mark.parametrize("fault", ["broker-restart", "leader-moves"])
def test_the_upstream_moving_under_a_static_group_loses_nothing_and_moves_nobody(
    fault: str,
    request: pytest.FixtureRequest,
    java_build: None,  # noqa: F811
    cluster: KafkaCluster,
    tmp_path: Path,
) -> None:
    rng = random.Random(seed_for(request.node.name))
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS)
    cluster.wait_in_sync(topic, PARTITIONS)
    node = gateway_process(tmp_path / "gw", cluster)  # type: ignore[arg-type]  # has .bootstrap
    node.start()
    group = f"{topic}-{fault}"
    members = [
        consumer(tmp_path, f"m{i}", node.bootstrap, topic, group, instance=f"m{i}")
        for i in range(3)
    ]
    p = producer(tmp_path, node.bootstrap, topic, RECORDS, RATE)
    try:
        for c in members:
            c.start()
        wait(
            settled(group_view(node, group), members, PARTITIONS), 90, "the group settled", members
        )
        generation = node.get(f"/groups/{group}")["generation"]
        p.start()
        time.sleep(3)
        started = time.time()
        if fault == "broker-restart":
            victim = cluster.leader_of(topic, rng.randrange(PARTITIONS))
            cluster.stop_broker(victim)
            time.sleep(rng.uniform(2, 5))
            cluster.start_broker(victim)
            cluster.wait_in_sync(topic, PARTITIONS)
        else:
            for partition in rng.sample(range(PARTITIONS), PARTITIONS):
                cluster.move_leader(topic, partition)
                time.sleep(rng.uniform(0.5, 2))
        stopping = finish(p, members, RECORDS, timeout=180, lossy=True)
        verdict(p, members, f"seed {seed_for(request.node.name)}\n{node.logs(3000)}")
        for c in members:
            moved = [e for e in assignments_since(c, started) if e.at < stopping]
            assert not moved, f"{c.name} rebalanced by an upstream {fault}: {moved}"
        assert node.get(f"/groups/{group}")["generation"] == generation
    finally:
        for t in (p, *members):
            t.kill()
        node.kill()
