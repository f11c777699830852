"""Apache Kafka's own VerifiableProducer and VerifiableConsumer through a gateway node, checked
as Kafka's system tests check them (tests/support/verifiable.py): every acknowledged record
consumed, commits never going back, no partition owned twice, nothing skipped past a commit;
and a static member's bounce within its session timeout moves nobody else.

Members bounce one at a time, cleanly (SIGTERM: the tool closes its consumer) or with kill -9,
on each of the Java consumer's assignors, with manual and with auto commit. The dynamic
cooperative kill -9 runs in `make test` (static bounces there come with the faults of
test_verifiable_faults.py); the rest are `make verify`'s. The node, database, broker
and network faults are in test_verifiable_faults.py and test_verifiable_brokers.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.verifiable import (
    assignments_since,
    consumer,
    finish,
    group_view,
    producer,
    rejoined,
    settled,
    verdict,
    wait,
)

pytestmark = pytest.mark.timeout(300)
HEAVY = pytest.mark.verify  # make verify only

RECORDS = 3000
RATE = 200  # records per second: the producer runs about 15 s, while members come and go
PARTITIONS = 3  # the `topic` fixture's


@pytest.mark.parametrize(
    ("assignor", "how"),
    [
        pytest.param("range", "clean", marks=HEAVY),
        pytest.param("cooperative-sticky", "clean", marks=HEAVY),
        pytest.param("sticky", "kill-9", marks=HEAVY),
        pytest.param("roundrobin", "kill-9", marks=HEAVY),
    ],
)
def test_a_static_members_bounce_moves_nobody_and_loses_nothing(
    assignor: str,
    how: str,
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group = f"{topic}-verifiable-{assignor}-{how}"
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
        wait(
            settled(group_view(node, group), members, PARTITIONS), 60, "the group settled", members
        )
        p.start()
        time.sleep(3)
        generation = node.get(f"/groups/{group}")["generation"]
        bounced_at = time.time()
        members[1].stop() if how == "clean" else members[1].kill()
        members[1].start()  # the same group.instance.id, well within its session timeout
        wait(rejoined(members[1], bounced_at), 60, "the bounced member is back", members)
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


@pytest.mark.parametrize(
    ("assignor", "commit", "how"),
    [
        ("cooperative-sticky", "manual", "kill-9"),
        pytest.param("range", "manual", "clean", marks=HEAVY),
        pytest.param("roundrobin", "auto", "clean", marks=HEAVY),
        pytest.param("sticky", "auto", "kill-9", marks=HEAVY),
    ],
)
def test_dynamic_members_rolling_bounce_loses_nothing_and_owns_nothing_twice(
    assignor: str,
    commit: str,
    how: str,
    java_build: None,  # noqa: F811
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory()
    group = f"{topic}-verifiable-rolling-{assignor}-{commit}-{how}"
    members = [
        consumer(
            tmp_path,
            f"d{i}",
            node.bootstrap,
            topic,
            group,
            assignor=assignor,
            auto_commit=commit == "auto",
            session_timeout_ms=10_000,  # a killed member is gone after 10 s
        )
        for i in range(3)
    ]
    p = producer(tmp_path, node.bootstrap, topic, RECORDS, RATE)
    try:
        for c in members:
            c.start()
        wait(
            settled(group_view(node, group), members, PARTITIONS), 60, "the group settled", members
        )
        p.start()
        for c in members:  # one at a time: it leaves (or dies), rejoins, the group rebalances
            time.sleep(2)
            since = time.time()
            c.stop() if how == "clean" else c.kill()
            c.start()
            wait(rejoined(c, since), 60, f"{c.name} rejoined", members)
        finish(p, members, RECORDS)
        verdict(p, members)
    finally:
        for t in (p, *members):
            t.kill()
