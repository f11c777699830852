"""Apache Kafka's own broker (kafka_2.13 4.x, KRaft, one node that is broker and controller) as an
OS process: the oracle of the differential conformance tests and the peer of the Apache Kafka
benchmark.

The jars come from tests/broker/pom.xml, resolved on first use into tests/broker/target/lib
(ignored) with `mvn dependency:copy-dependencies`: into a fresh folder that then replaces the old
one (jars of another version never share the classpath), re-resolved whenever the pom's text
changes (the stamp records Kafka's version and the pom's hash). `ensure_jars()` raises
`BrokerUnavailable` with the reason when java or mvn is missing or the resolve fails; the test
fixture turns that into a failure, never a skip.

How the broker is configured (said in the README and the benchmark's report): one KRaft node,
PLAINTEXT on 127.0.0.1, `offsets.topic.num.partitions=1` and replication factor 1 (one broker),
`group.initial.rebalance.delay.ms` as the caller asks (the coordinator's tests use the same delay
on both sides), a 256 MiB heap, the serial GC and the log in a temp dir.

`KafkaBroker(request_log=True)` turns Kafka's request logger (`kafka.request.logger`) to DEBUG:
its log then holds a "Completed request:{...}" line per request, and `requests_from(client_id)`
names the APIs a client sent. `KafkaCluster` is three such nodes (node ids 0, 1, 2, each broker
and controller), replication factor 3 and min.insync.replicas 2, whose brokers restart on their
log dirs and whose partition leaders move on request (the gateway's upstream-fault tests).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from storage.sql.cluster import random_cluster_id
from tests.support.nodes import ROOT, die_with_parent
from tests.support.ports import free_port

BROKER_DIR = ROOT / "tests" / "broker"
LIB = BROKER_DIR / "target" / "lib"
STAMP = LIB / ".complete"
KAFKA_VERSION = "4.4.0"  # = kafka.version in tests/broker/pom.xml and tests/java/pom.xml
DIFF_TOPIC = "diff-topic"  # the topic both sides of the differential suite know
DIFF_TOPIC_PARTITIONS = 4
JVM_OPTS = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
# slf4j-simple's level for Kafka's request logger: DEBUG logs one "Completed request:" per request
REQUEST_LOG_OPT = "-Dorg.slf4j.simpleLogger.log.kafka.request.logger=debug"

_lock = threading.Lock()


class BrokerUnavailable(RuntimeError):
    """java/mvn missing, the jars failed to resolve, or the broker did not start."""


def pom_stamp(pom: Path, version: str = KAFKA_VERSION) -> str:
    """What a stamp says of a resolve of `pom`: Kafka's version and the pom's hash (its mtime
    alone missed a pom older than the stamp, e.g. one a checkout wrote back)."""
    text = pom.read_text()
    if f"<kafka.version>{version}</kafka.version>" not in text:
        raise BrokerUnavailable(f"{pom} does not pin kafka.version {version} (KAFKA_VERSION)")
    return f"kafka {version} pom-sha256 {hashlib.sha256(text.encode()).hexdigest()}\n"


def stamp_current(stamp: Path, expected: str) -> bool:
    try:
        return stamp.read_text() == expected
    except OSError:
        return False


def swap_in(fresh: Path, lib: Path) -> None:
    """Replace `lib` by `fresh` (two renames: a JVM starting meanwhile sees one or the other)."""
    old = lib.with_name(lib.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if lib.exists():
        lib.rename(old)
    fresh.rename(lib)
    shutil.rmtree(old, ignore_errors=True)


def ensure_jars() -> None:
    with _lock:
        missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
        if missing:
            raise BrokerUnavailable(
                f"{' and '.join(missing)} not found on PATH: Apache Kafka's broker needs Java 17+"
                " and Maven 3.8+ (e.g. apt-get install openjdk-17-jdk-headless maven)"
            )
        pom = BROKER_DIR / "pom.xml"
        expected = pom_stamp(pom)
        if stamp_current(STAMP, expected):
            return
        fresh = LIB.with_name(f"lib.new-{os.getpid()}")
        shutil.rmtree(fresh, ignore_errors=True)
        cmd = [
            "mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={fresh}",
        ]  # fmt: skip
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            raise BrokerUnavailable(f"{' '.join(cmd)} timed out: {e.stdout!r} {e.stderr!r}") from e
        if r.returncode != 0:
            shutil.rmtree(fresh, ignore_errors=True)
            raise BrokerUnavailable(
                f"{' '.join(cmd)} failed (rc={r.returncode}):\n"
                f"{r.stdout[-8000:]}\n{r.stderr[-8000:]}"
            )
        (fresh / STAMP.name).write_text(expected)
        swap_in(fresh, LIB)


def _java(main_class: str, *args: str, props: tuple[str, ...] = ()) -> list[str]:
    return [
        "java", *JVM_OPTS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", *props,
        "-cp", f"{LIB}/*", main_class, *args,
    ]  # fmt: skip


_COMPLETED = "Completed request:"


def logged_requests(log_path: Path) -> list[dict[str, object]]:
    """The request headers of the request logger's "Completed request:{json}" lines."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    headers: list[dict[str, object]] = []
    for line in text.splitlines():
        _, found, rest = line.partition(_COMPLETED)
        if not found:
            continue
        try:
            entry = json.loads(rest)
        except ValueError:
            continue  # a line cut short by a stopping broker
        header = entry.get("requestHeader") if isinstance(entry, dict) else None
        if isinstance(header, dict):
            headers.append(header)
    return headers


def api_name(header: dict[str, object]) -> str:
    """METADATA -> Metadata, API_VERSIONS -> ApiVersions: the API's name in Kafka's docs."""
    name = str(header.get("requestApiKeyName", header.get("requestApiKey")))
    return "".join(part.capitalize() for part in name.split("_"))


class KafkaBroker:
    """One Apache Kafka KRaft node on 127.0.0.1; `start()` formats its log dir and waits until
    it answers Metadata with itself as a live broker."""

    def __init__(
        self,
        workdir: Path,
        *,
        initial_rebalance_delay_ms: int = 300,
        port: int | None = None,
        request_log: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        self.workdir = workdir
        self.host = host  # where clients reach it (the controller stays on loopback)
        self.port = port or free_port()
        self.controller_port = port + 1 if port else free_port()
        self.log_dir = workdir / "kraft-log"
        self.log_path = workdir / "kafka-broker.log"
        self.config_path = workdir / "server.properties"
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.request_log = request_log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def config(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(self.initial_rebalance_delay_ms),
            "auto.create.topics.enable": "false",
        }

    def start(self, timeout: float = 90.0) -> None:
        ensure_jars()
        self.format(random_cluster_id())
        self.launch()
        self._wait_ready(timeout)

    def resume(self, timeout: float = 90.0) -> None:
        """Start it again after `stop()`, on its log dir as it was (same cluster, topics and
        committed offsets)."""
        self.launch()
        self._wait_ready(timeout)

    def format(self, cluster_id: str) -> None:
        """Write the config and format the log dir (`kafka-storage format`)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        fmt = _java(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config_path)
        )
        r = subprocess.run(fmt, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise BrokerUnavailable(f"kafka-storage format failed:\n{r.stdout}\n{r.stderr}")

    def launch(self) -> None:
        """Start the JVM on the formatted log dir (its output appended to `log_path`)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            _java(
                "kafka.Kafka",
                str(self.config_path),
                props=(REQUEST_LOG_OPT,) if self.request_log else (),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BrokerUnavailable(
                    f"Apache Kafka exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if port_open(self.address):
                try:
                    admin = AdminClient({"bootstrap.servers": self.bootstrap})
                    if admin.list_topics(timeout=2).brokers:
                        return
                except Exception as e:  # KafkaException while the broker is still starting
                    last = e
            time.sleep(0.25)
        raise BrokerUnavailable(
            f"Apache Kafka not ready in {timeout}s ({last}):\n{self.log_tail()}"
        )

    def requests_from(self, client_id: str) -> list[str]:
        """The APIs of the requests a client with that client id sent, in the order the broker
        completed them ("ApiVersions", "Metadata", ...). Needs `request_log=True`."""
        if not self.request_log:
            raise ValueError("requests_from needs KafkaBroker(request_log=True)")
        headers = logged_requests(self.log_path)
        return [api_name(h) for h in headers if h.get("clientId") == client_id]

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a controlled shutdown: its partitions' leadership moves first), SIGKILL
        after `timeout` s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def create_topic(self, name: str, partitions: int) -> None:
        """CreateTopics through confluent-kafka's AdminClient (replication factor 1)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)
        for f in futures.values():
            with contextlib.suppress(Exception):
                f.result(timeout=30)  # TOPIC_ALREADY_EXISTS is fine
        _wait_topic(self.bootstrap, name)


class ClusterNode(KafkaBroker):
    """One node of a `KafkaCluster`: broker and controller, node id `node_id`, voting with the
    others; replication factor 3 everywhere, min.insync.replicas 2, leaders moved only when asked
    (no automatic preferred-leader rebalance)."""

    def __init__(
        self,
        cluster: KafkaCluster,
        node_id: int,
        *,
        request_log: bool = False,
        initial_rebalance_delay_ms: int = 300,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(
            cluster.workdir / f"node-{node_id}",
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            request_log=request_log,
            host=host,
        )
        self.cluster = cluster
        self.node_id = node_id
        self.log_path = self.workdir / f"kafka-broker-{node_id}.log"

    def config(self) -> dict[str, str]:
        rf = str(len(self.cluster.nodes))
        return {
            **super().config(),
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.cluster.voters,
            "default.replication.factor": rf,
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "2",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "2",
            "auto.leader.rebalance.enable": "false",
            # small JVMs: fewer threads than Kafka's defaults
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.replica.fetchers": "1",
            "log.cleaner.threads": "1",
        }


class KafkaCluster:
    """Three Apache Kafka KRaft nodes on 127.0.0.1 (node ids 0, 1, 2; each broker and
    controller), replication factor 3, min.insync.replicas 2. `stop_broker(i)` is a controlled
    shutdown (its leaderships move to the others); `start_broker(i)` restarts it on its log dir.
    `bootstrap` names the three brokers (what `gateway_process` takes as its upstream)."""

    SIZE = 3

    def __init__(
        self,
        workdir: Path,
        *,
        request_log: bool = False,
        initial_rebalance_delay_ms: int = 300,
        host: str = "127.0.0.1",
    ) -> None:
        self.workdir = workdir
        self._admin_client: Any = None
        self.nodes: list[ClusterNode] = []
        for i in range(self.SIZE):
            self.nodes.append(
                ClusterNode(
                    self,
                    i,
                    request_log=request_log,
                    initial_rebalance_delay_ms=initial_rebalance_delay_ms,
                    host=host,
                )
            )

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def _admin(self) -> Any:
        """One AdminClient for the cluster's life (a client dropped before its futures resolve
        fails them with _DESTROY); librdkafka's own log is off: a stopped broker is expected."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin_client

    def start(self, timeout: float = 180.0) -> None:
        """Format the three log dirs with one cluster id, start the JVMs together (a quorum needs
        two voters) and wait until the cluster lists every broker."""
        ensure_jars()
        cluster_id = random_cluster_id()
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:  # a JVM each
            list(pool.map(lambda node: node.format(cluster_id), self.nodes))
        for node in self.nodes:
            node.launch()
        self.wait_brokers({n.node_id for n in self.nodes}, timeout)

    def stop(self) -> None:
        """Every node at once (one at a time, the last would wait for a quorum to shut down)."""
        for node in self.nodes:
            if node.running and node.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGTERM)
        for node in self.nodes:
            node.stop(timeout=15)
        self._admin_client = None

    def stop_broker(self, i: int, timeout: float = 30.0) -> None:
        """A controlled shutdown of node `i` (its leaderships move first), then wait until the
        others no longer list it."""
        self.nodes[i].stop(timeout=timeout)
        self.wait_brokers({n.node_id for n in self.nodes if n.running}, timeout)

    def start_broker(self, i: int, timeout: float = 90.0) -> None:
        """Node `i` again, on its log dir (not formatted again), until the cluster lists it."""
        node = self.nodes[i]
        if node.running:
            raise RuntimeError(f"broker {i} is running")
        node.launch()
        self.wait_brokers({n.node_id for n in self.nodes if n.running}, timeout)

    def wait_brokers(self, ids: set[int], timeout: float) -> None:
        """Until Metadata lists exactly the brokers `ids` (a node that exited is an error)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() not in (None, 0, -15, 143):
                    raise BrokerUnavailable(
                        f"broker {node.node_id} exited with {node.proc.returncode}:\n"
                        f"{node.log_tail()}"
                    )
            try:
                last = set(self._admin().list_topics(timeout=3).brokers)
                if last == ids:
                    return
            except Exception as e:  # KafkaException while the cluster is still starting
                last = e
            time.sleep(0.3)
        tails = "\n".join(f"--- broker {n.node_id}\n{n.log_tail(20)}" for n in self.nodes)
        raise BrokerUnavailable(
            f"brokers {sorted(ids)} not listed in {timeout}s ({last}):\n{tails}"
        )

    def create_topic(self, name: str, partitions: int, rf: int = 3) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self._admin().create_topics(
            [NewTopic(name, partitions, rf)], operation_timeout=30
        )
        for f in futures.values():
            f.result(timeout=30)
        self.wait_in_sync(name, partitions)

    def partition(self, topic: str, partition: int) -> Any:
        """confluent-kafka's PartitionMetadata (leader, replicas in assignment order, isrs)."""
        md = self._admin().list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None or partition not in t.partitions:
            raise BrokerUnavailable(f"{topic}[{partition}] not in Metadata: {t and t.error}")
        return t.partitions[partition]

    def leader_of(self, topic: str, partition: int) -> int:
        return int(self.partition(topic, partition).leader)

    def wait_in_sync(self, topic: str, partitions: int, timeout: float = 60.0) -> None:
        """Until every partition has a leader and every replica in its ISR."""
        deadline = time.monotonic() + timeout
        state: object = None
        while time.monotonic() < deadline:
            try:
                parts = [self.partition(topic, p) for p in range(partitions)]
                state = [(p.leader, p.replicas, p.isrs) for p in parts]
                if all(p.leader >= 0 and set(p.isrs) == set(p.replicas) for p in parts):
                    return
            except Exception as e:  # not in Metadata yet
                state = e
            time.sleep(0.3)
        raise BrokerUnavailable(f"{topic} not in sync after {timeout}s: {state}")

    def move_leader(
        self, topic: str, partition: int, to: int | None = None, timeout: float = 30.0
    ) -> int:
        """Make broker `to` (default: the first in-sync replica that is not the leader) lead
        the partition: a reassignment that only reorders the replicas (`to` first: the preferred
        leader; AlterPartitionReassignments), then a preferred-leader election (ElectLeaders).
        Returns the new leader."""
        import asyncio

        from confluent_kafka import ElectionType, TopicPartition

        p = self.partition(topic, partition)
        if to is None:
            to = next(r for r in p.replicas if r != p.leader and r in p.isrs)
        if to not in p.isrs:
            raise ValueError(f"broker {to} is not in {topic}[{partition}]'s ISR {p.isrs}")
        order = [to, *(r for r in p.replicas if r != to)]
        asyncio.run(self._reassign(topic, partition, order, timeout))
        deadline = time.monotonic() + timeout
        while list(self.partition(topic, partition).replicas) != order:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"{topic}[{partition}]: replicas never became {order}")
            time.sleep(0.2)
        while (leader := self.leader_of(topic, partition)) != to:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"{topic}[{partition}]: leader {leader}, not {to}")
            future = self._admin().elect_leaders(
                ElectionType.PREFERRED, [TopicPartition(topic, partition)]
            )
            results = future.result(timeout=timeout)
            errors = [e for e in results.values() if e is not None]
            if errors and errors[0].name() != "ELECTION_NOT_NEEDED":
                raise BrokerUnavailable(f"ElectLeaders {topic}[{partition}]: {errors[0]}")
            time.sleep(0.2)
        return to

    async def _reassign(self, topic: str, partition: int, order: list[int], timeout: float) -> None:
        from tests.support.kafka_client import KafkaTestClient

        node = next(n for n in self.nodes if n.running)
        client = await KafkaTestClient.connect(*node.address)
        try:
            request = client.build_request(
                45,
                0,
                timeout=int(timeout * 1000),
                topics=[
                    {
                        "name": topic,
                        "partitions": [{"partition_index": partition, "replicas": order}],
                    }
                ],
            )
            reply = await client.request(request, timeout=timeout)
        finally:
            await client.close()
        errors = [int(reply.error_code)] + [
            int(p.error_code) for t in reply.responses for p in t.partitions
        ]
        if any(errors):
            raise BrokerUnavailable(f"AlterPartitionReassignments {topic}[{partition}]: {reply}")


class _Startable(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Startable)


@contextlib.contextmanager
def running(server: S, needed: str, then: Callable[[S], None] | None = None) -> Iterator[S]:
    """A test fixture's broker or cluster: started (and `then` done) for the block, stopped
    after. A start that fails fails the test, never skips it; `needed` says what for."""
    import pytest

    try:
        server.start()
        if then is not None:
            then(server)
    except BrokerUnavailable as e:
        server.stop()
        pytest.fail(f"{needed}: {e}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _wait_topic(bootstrap: str, name: str, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        t = md.topics.get(name)
        ready = t is not None and t.error is None and bool(t.partitions)
        if ready and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise BrokerUnavailable(f"topic {name} has no leaders after {timeout}s")


def port_open(address: tuple[str, int]) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(address, timeout=1):
        return True
    return False


async def warm_up(address: tuple[str, int], timeout: float = 60.0) -> None:
    """FindCoordinator until it answers without error (Apache Kafka creates __consumer_offsets on
    the first one and answers NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE until it is led), then
    one group formed and left: that warms the JVM up (a cold broker took the first join of the
    first scenario so late that the second member was made leader). BrokerUnavailable (a
    RuntimeError) when it never answers."""
    import asyncio

    from tests.support.kafka_client import KafkaTestClient

    c = await KafkaTestClient.connect(*address)
    try:
        deadline = time.monotonic() + timeout
        while (reply := await c.find_coordinator("warm-up", version=3)).error_code != 0:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"FindCoordinator still answers {reply.error_code!r}")
            await asyncio.sleep(0.2)
        joined = await c.join_group("warm-up", version=3)
        await c.sync_group("warm-up", joined.generation_id, joined.member_id, version=3)
        await c.leave_group("warm-up", joined.member_id, version=3)
    finally:
        await c.close()


def wait_for_coordinator(address: tuple[str, int], timeout: float = 60.0) -> None:
    """`warm_up` from synchronous code (the test fixtures)."""
    import asyncio

    asyncio.run(warm_up(address, timeout))


def main() -> None:
    """`make kafka`: one Apache Kafka broker in the foreground (gateway mode's upstream, by
    hand), its log under ./data/kafka, the topics asked for created; Ctrl-C stops it."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.support.kafka_broker")
    parser.add_argument("--port", type=int, default=19092)
    parser.add_argument("--topics", default="demo:6", help="name:partitions,…")
    parser.add_argument("--dir", type=Path, default=ROOT / "data" / "kafka")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    broker = KafkaBroker(args.dir, port=args.port)
    broker.start()
    try:
        for item in filter(None, args.topics.split(",")):
            name, _, n = item.rpartition(":")
            broker.create_topic(name, int(n))
        print(
            f"Apache Kafka {KAFKA_VERSION} on {broker.bootstrap} (controller on "
            f"{broker.controller_port}), topics {args.topics}; log {broker.log_path}; Ctrl-C stops",
            flush=True,
        )
        assert broker.proc is not None
        broker.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
