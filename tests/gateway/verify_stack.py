"""The stage of the fault scenarios (test_verifiable_faults.py): a private network (tests/support
/netns.py) with PostgreSQL and an Apache Kafka broker on addresses of its bridge, and gateway
nodes each in a network namespace of its own, so a test can cut one node from the database, the
upstream or its clients, or make its link flap; Kafka's verifiable tools run outside, as clients.

Each scenario takes a seed (COORD_VERIFY_SEED, else one derived from its name) for every choice
it makes, and names it when it fails, so a failure can be run again as it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.runtime.placement import partition_for
from tests.support.kafka_broker import KafkaBroker, running
from tests.support.kafka_client import KafkaTestClient
from tests.support.netns import Lab, Namespace
from tests.support.nodes import CoordinatorProcess
from tests.support.ports import free_port_block
from tests.support.postgres import PrivatePostgres
from tests.support.verifiable import group_view

TTL_MS = 3000
LOG_PARTITIONS = 4  # tests/support/nodes.py DEFAULTS' COORD_LOG_PARTITIONS
BROKER_PORTS = 16
PARTITIONS = 3


def seed_for(name: str) -> int:
    if raw := os.environ.get("COORD_VERIFY_SEED"):
        return int(raw)
    return zlib.crc32(name.encode())


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with Lab() as lab:
        yield lab


@pytest.fixture(scope="module")
def lab_postgres(lab: Lab) -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres(hosts=(lab.service_address(2),), trust_from=(f"{lab.prefix}.0/24",))
    try:
        pg.start()
        yield pg
    finally:
        pg.cleanup()


@pytest.fixture(scope="module")
def lab_broker(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("lab-kafka"), host=lab.service_address(3))
    with running(broker, "Apache Kafka on the lab's network is needed here"):
        yield broker


@pytest.fixture(scope="module")
def lab_namespaces(lab: Lab) -> list[Namespace]:
    return [lab.namespace() for _ in range(3)]


@dataclass
class Stack:
    lab: Lab
    postgres: PrivatePostgres
    broker: KafkaBroker
    namespaces: list[Namespace]
    nodes: list[CoordinatorProcess]
    topic: str
    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def bootstrap(self) -> str:
        """What a client is configured with: every gateway node."""
        return ",".join(n.bootstrap for n in self.nodes)

    def view(self, group: str) -> Callable[[], dict[str, Any] | None]:
        """The group as the first node that answers describes it (any node redirects to the
        one that coordinates it)."""

        views = [(n, group_view(n, group)) for n in self.nodes]
        return lambda: next((g for n, v in views if n.live and (g := v()) is not None), None)

    def node(self, node_id: int) -> CoordinatorProcess:
        return next(n for n in self.nodes if n.node_id == node_id)

    def namespace_of(self, node: CoordinatorProcess) -> Namespace:
        return self.namespaces[self.nodes.index(node)]

    def coordinator(self, group: str, timeout: float = 30) -> CoordinatorProcess:
        """The node FindCoordinator names for `group` (asked of every live node in turn)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.nodes:
                if n.live and (found := asyncio.run(_find_coordinator(n, group))) is not None:
                    return self.node(found)
            time.sleep(0.2)
        raise AssertionError(f"no node names a coordinator for {group} after {timeout} s")

    def data_node(self) -> CoordinatorProcess:
        """The node a client's records go through: where the Metadata answer places the
        upstream broker leading the topic's first partition."""
        reply = asyncio.run(_metadata(self.nodes[0], self.topic))
        leader = reply.topics[0].partitions[0].leader_id
        host = next(b.host for b in reply.brokers if b.node_id == leader)
        return next(n for n in self.nodes if n.host == host)

    def placement(self, node: CoordinatorProcess) -> Any:
        """Where `node`'s Metadata places the upstream brokers (a diagnostic)."""
        try:
            reply = asyncio.run(_metadata(node, self.topic))
        except (OSError, TimeoutError, ConnectionError) as e:
            return f"{node.name}: {e!r}"
        return [(b.node_id, b.host, b.port) for b in reply.brokers]

    def context(self) -> str:
        logs = "\n".join(n.logs(3000) for n in self.nodes)
        return f"seed {self.seed} (COORD_VERIFY_SEED={self.seed} reruns it)\n{logs}"


async def _metadata(node: CoordinatorProcess, topic: str) -> Any:
    c = await asyncio.wait_for(KafkaTestClient.connect(*node.address), 5)
    try:
        return await c.metadata([topic])
    finally:
        await c.close()


async def _find_coordinator(node: CoordinatorProcess, group: str) -> int | None:
    try:
        c = await asyncio.wait_for(KafkaTestClient.connect(*node.address), 2)
    except (OSError, TimeoutError):
        return None
    try:
        r = await c.find_coordinator(group, version=3)
        if r.error_code != 0:
            return None
        return int(r.node_id) % 1_000_000_000  # COORD_GATEWAY_COORDINATOR_ID_BASE + node id
    except (OSError, TimeoutError, ConnectionError):
        return None
    finally:
        await c.close()


def make_stack(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    lab: Lab,
    postgres: PrivatePostgres,
    broker: KafkaBroker,
    namespaces: list[Namespace],
    count: int,
) -> Iterator[Stack]:
    """`count` gateway nodes on a fresh database, each in its namespace; every cut healed and
    every node killed at the end."""
    from storage.migrate import upgrade_async

    db = f"verify_{uuid.uuid4().hex[:10]}"
    postgres.create_database(db)
    asyncio.run(upgrade_async(postgres.url(db)))
    url = postgres.url(db, host=lab.service_address(2))
    nodes = []
    for i, ns in enumerate(namespaces[:count], start=1):
        workdir = tmp_path / f"gw{i}"
        workdir.mkdir()
        env = {
            "COORD_UPSTREAM_BOOTSTRAP": broker.bootstrap,
            "COORD_TOPICS": "",
            "COORD_LEASE_TTL_MS": str(TTL_MS),
            "COORD_ADMIN_ALLOW_INSECURE": "true",  # a private network only this test reaches
        }
        node = CoordinatorProcess(
            url, workdir, env, node_id=i, host=ns.address, command_prefix=tuple(ns.exec_prefix)
        )
        node.kafka_port = free_port_block(1 + BROKER_PORTS)
        nodes.append(node)
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, PARTITIONS)
    stack = Stack(
        lab, postgres, broker, namespaces[:count], nodes, topic, seed_for(request.node.name)
    )
    try:
        for n in nodes:
            n.start(wait_ready=False)
        for n in nodes:
            n.wait_ready(60)
        yield stack
    finally:
        for n in nodes:  # first: a node left running would keep its namespace alive
            with contextlib.suppress(Exception):
                n.kill()
        for ns in namespaces:
            ns.heal()


class Probe(threading.Thread):
    """Asks every node for the group's offsets (OffsetFetch) every 100 ms: when each answered as
    the group's coordinator. A node answers so only while it holds the group's lease, so the
    spans of two nodes must never overlap (zombie fencing, seen from a client)."""

    def __init__(self, nodes: list[CoordinatorProcess], group: str) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.group = group
        # (sent, received, node id) of every answer without an error
        self.answers: list[tuple[float, float, int]] = []
        # (received, node asked, node named) of every FindCoordinator answer naming one
        self.named: list[tuple[float, int, int]] = []
        self._done = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # anything but a dead link: stop() raises it
            self.failure = e

    def stop(self) -> None:
        """Stop asking; raise what ended the probe early, if anything did."""
        self._done.set()
        self.join(10)
        if self.failure is not None:
            raise AssertionError(f"the probe failed: {self.failure!r}") from self.failure

    async def _main(self) -> None:
        clients: dict[int, KafkaTestClient] = {}
        while not self._done.is_set():
            for n in self.nodes:
                assert n.node_id is not None
                sent = time.time()
                try:
                    if n.node_id not in clients:
                        clients[n.node_id] = await asyncio.wait_for(
                            KafkaTestClient.connect(*n.address, client_id="probe"), 1
                        )
                    r = await asyncio.wait_for(
                        clients[n.node_id].offset_fetch(self.group, version=8), 2
                    )
                    if r.groups[0].error_code == 0:
                        self.answers.append((sent, time.time(), n.node_id))
                    f = await asyncio.wait_for(
                        clients[n.node_id].find_coordinator(self.group, version=3), 2
                    )
                    if f.error_code == 0:
                        self.named.append((time.time(), n.node_id, f.node_id % 1_000_000_000))
                except (OSError, TimeoutError, ConnectionError):
                    if (c := clients.pop(n.node_id, None)) is not None:
                        with contextlib.suppress(Exception):  # a dead link may not close
                            await asyncio.wait_for(c.close(), 1)
            await asyncio.sleep(0.1)
        for c in clients.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.close(), 1)

    def answered(self, node_id: int, after: float) -> list[tuple[float, float, int]]:
        return [a for a in self.answers if a[2] == node_id and a[1] > after]


_TOOK = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO .*took partition (-?\d+) ", re.M
)


def leases_taken(node: CoordinatorProcess, group: str, since: float) -> list[float]:
    """When (wall-clock seconds) `node` took the lease of `group`'s log partition after
    `since`, by its log."""
    pid = partition_for(group, LOG_PARTITIONS)
    out = []
    for m in _TOOK.finditer(node.log_text()):
        at = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        if at > since and int(m.group(3)) == pid:
            out.append(at)
    return out
