"""Apache Kafka's own VerifiableProducer and VerifiableConsumer through a gateway node, checked
as Kafka's system tests check them (tests/support/verifiable.py): every acknowledged record
consumed, commits never going back, no partition owned twice, nothing skipped past a commit;
and a static member's bounce within its session timeout moves nobody else.

The first scenarios of the proof on records; the faults (nodes, PostgreSQL, brokers, network
partitions) come next, and so does `make test` (the `verify` marker keeps them in
`make verify` until then).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.verifiable import (
    assignments_since,
    consumer,
    finish,
    producer,
    rejoined,
    settled,
    verdict,
    wait,
)

pytestmark = [pytest.mark.verify, pytest.mark.timeout(300)]

RECORDS = 3000
RATE = 200  # records per second: the producer runs about 15 s, while members come and go
PARTITIONS = 3  # the `topic` fixture's


def view(node: CoordinatorProcess, group: str) -> Callable[[], dict[str, Any] | None]:
    def read() -> dict[str, Any] | None:
        try:
            g: dict[str, Any] = node.get(f"/groups/{group}")
            return g
        except OSError:
            return None

    return read


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_static_members_bounce_moves_nobody_and_loses_nothing(
    assignor: str,
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group = f"{topic}-verifiable-{assignor}"
    members = [
        consumer(
            tmp_path, f"w{i}", node.bootstrap, topic, group, instance=f"w{i}", assignor=assignor
        )
        for i in range(3)
    ]
    p = producer(tmp_path, node.bootstrap, topic, RECORDS, RATE)
    try:
        for c in members:
            c.start()
        wait(settled(view(node, group), members, PARTITIONS), 60, "the group settled", members)
        p.start()
        time.sleep(3)
        generation = node.get(f"/groups/{group}")["generation"]
        bounced_at = time.time()
        members[1].stop()
        members[1].start()  # the same group.instance.id, well within its session timeout
        wait(
            lambda: bool(assignments_since(members[1], bounced_at)),
            60,
            "the bounced member got its partitions back",
            members,
        )
        stopping = finish(p, members, RECORDS)
        verdict(p, members)
        for other in (members[0], members[2]):
            moved = [e for e in assignments_since(other, bounced_at) if e.at < stopping]
            timeline = node.get(f"/groups/{group}/timeline")
            assert not moved, f"{other.name} rebalanced by a static bounce: {moved}\n{timeline}"
        assert node.get(f"/groups/{group}")["generation"] == generation
    finally:
        for t in (p, *members):
            t.kill()


def test_dynamic_members_rolling_bounce_loses_nothing_and_owns_nothing_twice(
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group = f"{topic}-verifiable-rolling"
    members = [consumer(tmp_path, f"d{i}", node.bootstrap, topic, group) for i in range(3)]
    p = producer(tmp_path, node.bootstrap, topic, RECORDS, RATE)
    try:
        for c in members:
            c.start()
        wait(settled(view(node, group), members, PARTITIONS), 60, "the group settled", members)
        p.start()
        for c in members:  # one at a time: a clean leave, a rejoin, the group rebalances twice
            time.sleep(2)
            since = time.time()
            c.stop()
            c.start()
            wait(rejoined(c, since), 60, f"{c.name} rejoined", members)
        finish(p, members, RECORDS)
        verdict(p, members)
    finally:
        for t in (p, *members):
            t.kill()
