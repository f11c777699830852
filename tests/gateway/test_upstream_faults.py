"""A gateway node in front of a three-broker Apache Kafka cluster (KafkaCluster: KRaft, node ids
0-2, replication factor 3, min.insync.replicas 2) while its upstream fails under load.

An idempotent confluent-kafka producer (acks=all) and a static group of two confluent-kafka
consumers (group.instance.id) run through the gateway throughout; meanwhile (a) the broker that
leads partition 0 is stopped (a controlled shutdown), stays down a few seconds and is started again
on its log dir, then (b) partition 0's leadership is moved back to that broker (a reassignment that
only reorders the replicas, then a preferred-leader election). Nobody tells the clients: they find
the new leaders through the relayed, rewritten Metadata. Checked: every acknowledged record is
consumed, at the partition and offset it was acknowledged at; no offset of a partition is skipped;
no commit goes back (each accepted commit, and the group's committed offsets read back at each
step); the producer's records kept being acknowledged while the broker was down, and after the
move its Produce requests and a consumer's Fetch requests reached the new leader (its request log).
Every loop is bounded in count and time. The three JVMs and the faults take 2-4 minutes here:
the module runs in make test's parallel phase beside the others.
"""

from __future__ import annotations

import gc
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.gateway.conftest import gateway_process
from tests.gateway.test_records import admin_json
from tests.support.kafka_broker import KafkaCluster
from tests.support.nodes import CoordinatorProcess

pytestmark = pytest.mark.timeout(420)

PARTITIONS = 3
MAX_RECORDS = 20_000  # the producer's bound, whatever the time
PRODUCE_EVERY = 0.01  # s between records: at most 100 a second
PRODUCER_ID = "faults-producer"
CONSUMER_IDS = ("faults-consumer-0", "faults-consumer-1")
COMMIT_EVERY = 0.3  # s


@pytest.fixture
def gateway(tmp_path: Path, cluster: KafkaCluster) -> Iterator[CoordinatorProcess]:
    node = gateway_process(tmp_path / "gw", cluster)  # type: ignore[arg-type]  # has .bootstrap
    node.start()
    try:
        yield node
    finally:
        node.kill()


class Load:
    """The producer and the two consumers, each on a thread of its own, and what they saw."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.topic = topic
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.produced = 0
        self.acked: dict[str, tuple[int, int, float]] = {}  # value -> partition, offset, when
        self.delivery_errors: list[str] = []
        self.consumed: dict[str, tuple[int, int]] = {}  # value -> partition, offset
        self.offsets: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        self.committed: dict[int, int] = {}  # partition -> highest accepted commit
        self.commit_regressions: list[str] = []
        self.commit_errors: list[str] = []
        self.thread_errors: list[BaseException] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": PRODUCER_ID,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "delivery.timeout.ms": 120_000,
            }
        )
        self.consumers = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "client.id": CONSUMER_IDS[i],
                    "group.id": group,
                    "group.instance.id": f"worker-{i}",
                    "session.timeout.ms": 10_000,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
            for i in range(2)
        ]
        self.pending: list[dict[int, int]] = [{}, {}]  # per consumer: partition -> next offset
        self.threads = [
            threading.Thread(target=self._guard, args=(self._produce,), daemon=True),
            threading.Thread(target=self._guard, args=(self._consume,), daemon=True),
        ]

    def start(self) -> None:
        for i, c in enumerate(self.consumers):
            c.subscribe([self.topic], on_revoke=lambda _c, _parts, i=i: self.pending[i].clear())
        for t in self.threads:
            t.start()

    def _guard(self, fn: Any) -> None:
        try:
            fn()
        except BaseException as e:  # surfaced by check_threads
            self.thread_errors.append(e)

    def _delivered(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.delivery_errors.append(str(err))
            else:
                self.acked[msg.value().decode()] = (msg.partition(), msg.offset(), time.monotonic())

    def _produce(self) -> None:
        for i in range(MAX_RECORDS):
            if self.stop_producing.is_set():
                break
            while True:
                try:
                    self.producer.produce(
                        self.topic, key=str(i).encode(), value=f"r-{i}".encode(),
                        on_delivery=self._delivered,
                    )  # fmt: skip
                    break
                except BufferError:  # the local queue is full while a leader moves
                    self.producer.poll(0.1)
            self.produced = i + 1
            self.producer.poll(0)
            time.sleep(PRODUCE_EVERY)

    def _consume(self) -> None:
        last_commit = time.monotonic()
        while not self.stop_consuming.is_set():
            for i, c in enumerate(self.consumers):
                for msg in c.consume(500, 0.05):
                    if msg.error() is not None:
                        if msg.error().retriable() or msg.error().code() in (
                            KafkaError._TRANSPORT, KafkaError._PARTITION_EOF,
                        ):  # fmt: skip
                            continue
                        raise KafkaException(msg.error())
                    with self.lock:
                        value = msg.value().decode()
                        self.consumed.setdefault(value, (msg.partition(), msg.offset()))
                        self.offsets[msg.partition()].add(msg.offset())
                    self.pending[i][msg.partition()] = msg.offset() + 1
            if time.monotonic() - last_commit >= COMMIT_EVERY:
                for i, c in enumerate(self.consumers):
                    self._commit(i, c)
                last_commit = time.monotonic()
        for i, c in enumerate(self.consumers):
            self._commit(i, c)

    def _commit(self, i: int, c: Consumer) -> None:
        offsets = dict(self.pending[i])
        if not offsets:
            return
        parts = [TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())]
        try:
            c.commit(offsets=parts, asynchronous=False)
        except KafkaException as e:  # e.g. during the group's first rebalance: read again later
            self.commit_errors.append(str(e.args[0]))
            return
        with self.lock:
            for p, o in offsets.items():
                if o < self.committed.get(p, 0):
                    self.commit_regressions.append(f"p{p}: {o} after {self.committed[p]}")
                self.committed[p] = max(o, self.committed.get(p, 0))
        for p, o in offsets.items():
            if self.pending[i].get(p) == o:
                del self.pending[i][p]

    # --- waits and checks --------------------------------------------------------------------

    def check_threads(self) -> None:
        assert not self.thread_errors, f"a client thread failed: {self.thread_errors!r}"
        producing = not self.stop_producing.is_set()
        alive = [t.is_alive() for t in (self.threads if producing else self.threads[1:])]
        assert all(alive), "a client thread ended early"

    def wait_consumed(self, n: int, timeout: float = 90.0) -> None:
        """Until `n` more records are consumed, and the consumers caught up to the acks of
        partition 0 that were there when called (the partition whose leader moves)."""
        with self.lock:
            target = len(self.consumed) + n
            p0 = {v for v, (p, _, _) in self.acked.items() if p == 0}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_threads()
            with self.lock:
                if len(self.consumed) >= target and p0.issubset(self.consumed):
                    return
            time.sleep(0.2)
        with self.lock:
            state = f"{len(self.consumed)} of {target} consumed, {len(p0 - set(self.consumed))}"
        raise AssertionError(f"{state} acked records of partition 0 unread after {timeout}s")

    def acked_on(self, partition: int, since: float, until: float) -> int:
        with self.lock:
            return sum(
                1 for p, _, t in self.acked.values() if p == partition and since <= t <= until
            )

    def group_committed(self, bootstrap: str, group: str) -> dict[int, int]:
        """The committed offsets as the coordinator holds them: OffsetFetch through the gateway
        by a consumer of the group that never joins it."""
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
            got = reader.committed(parts, timeout=15)
        finally:
            reader.close()
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def committed_never_back(before: dict[int, int], after: dict[int, int]) -> list[str]:
    return [f"p{p}: {o} -> {after.get(p)}" for p, o in before.items() if after.get(p, -1) < o]


def test_clients_follow_a_broker_restart_and_a_leader_move_through_the_gateway(
    cluster: KafkaCluster, gateway: CoordinatorProcess
) -> None:
    started = time.monotonic()

    def lap(what: str) -> None:  # the phases' times, printed with a failure
        print(f"{time.monotonic() - started:7.1f} s  {what}", flush=True)

    topic = f"faults-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS, rf=3)
    upstream = admin_json(gateway, "/cluster")["upstream"]
    assert upstream["reachable"] and upstream["unplaced_broker_ids"] == []
    group = f"{topic}-group"
    load = Load(gateway.bootstrap, topic, group)
    load.start()

    def committed() -> dict[int, int]:
        return load.group_committed(gateway.bootstrap, group)

    try:
        load.wait_consumed(300)
        snapshots = [committed()]
        lap(f"{len(load.consumed)} consumed, commits {snapshots[0]}")

        # (a) the broker leading partition 0 stops (controlled shutdown), then starts again
        restarted = cluster.leader_of(topic, 0)
        down_at = time.monotonic()
        cluster.stop_broker(restarted)
        lap(f"broker {restarted} stopped")
        interim = cluster.leader_of(topic, 0)
        assert interim != restarted
        time.sleep(4)
        load.wait_consumed(200)  # consumption goes on with a broker down
        lap(f"{len(load.consumed)} consumed with broker {restarted} down")
        cluster.start_broker(restarted)
        up_at = time.monotonic()
        cluster.wait_in_sync(topic, PARTITIONS)
        lap(f"broker {restarted} back in sync")
        load.wait_consumed(300)
        lap(f"{len(load.consumed)} consumed")
        snapshots.append(committed())
        assert load.acked_on(0, down_at, up_at) > 0, "no record of partition 0 acked while down"

        # (b) partition 0's leadership moves back to the restarted broker, which leads nothing
        # else (no automatic rebalance): the requests it gets from now on are partition 0's
        produce_before = cluster.nodes[restarted].requests_from(PRODUCER_ID).count("Produce")
        fetch_before = sum(
            cluster.nodes[restarted].requests_from(c).count("Fetch") for c in CONSUMER_IDS
        )
        moved_at = time.monotonic()
        assert cluster.move_leader(topic, 0, to=restarted) == restarted
        lap(f"partition 0's leader moved from {interim} to {restarted}")
        load.wait_consumed(300)
        lap(f"{len(load.consumed)} consumed")
        snapshots.append(committed())
        assert load.acked_on(0, moved_at, time.monotonic()) > 0
        requests = {c: cluster.nodes[restarted].requests_from(c) for c in CONSUMER_IDS}
        assert cluster.nodes[restarted].requests_from(PRODUCER_ID).count("Produce") > (
            produce_before
        ), "the producer never sent Produce to partition 0's new leader"
        assert sum(r.count("Fetch") for r in requests.values()) > fetch_before, (
            "no consumer fetched from partition 0's new leader"
        )
    finally:
        load.stop_producing.set()
        for t in load.threads[:1]:
            t.join(timeout=30)
        unsent = load.producer.flush(60)
        lap(f"{load.produced} produced, {len(load.acked)} acked")
        # destroyed now, not at some later collection: its client would retry the gateway's
        # closed ports and log to the next tests' output until then
        load.producer = None  # type: ignore[assignment]
        gc.collect()
    try:
        assert unsent == 0, f"{unsent} records still unacknowledged 60 s after the last"
        with load.lock:
            acked = dict(load.acked)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            load.check_threads()
            with load.lock:
                if set(acked).issubset(load.consumed):
                    break
            time.sleep(0.2)
        lap(f"{len(load.consumed)} consumed")
        load.stop_consuming.set()
        load.threads[1].join(timeout=60)
        assert not load.thread_errors, f"a client thread failed: {load.thread_errors!r}"
        snapshots.append(committed())
    finally:
        for c in load.consumers:
            c.close()

    # every acked record consumed, where it was acked
    missing = set(acked) - set(load.consumed)
    assert not missing, f"{len(missing)} acked records never consumed, e.g. {sorted(missing)[:5]}"
    moved = {v: (acked[v][:2], load.consumed[v]) for v in acked if acked[v][:2] != load.consumed[v]}
    assert not moved, f"records consumed elsewhere than acked: {list(moved.items())[:5]}"
    assert load.delivery_errors == [], load.delivery_errors[:5]
    # none skipped: each partition's offsets are read from 0 to its end without a gap
    for p, seen in load.offsets.items():
        assert seen, f"partition {p} never consumed"
        gaps = sorted(set(range(max(seen) + 1)) - seen)
        assert not gaps, f"partition {p}: offsets {gaps[:10]} skipped"
    # commits never went back, and the last ones are the partitions' ends
    assert load.commit_regressions == [], load.commit_regressions
    for before, after in itertools.pairwise(snapshots):
        assert not committed_never_back(before, after), (before, after)
    assert snapshots[-1] == {p: max(seen) + 1 for p, seen in load.offsets.items()}
