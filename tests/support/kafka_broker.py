"""Apache Kafka's own broker (kafka_2.13 4.x, KRaft, one node that is broker and controller) as an
OS process: the oracle of the differential conformance tests and the peer of the Apache Kafka
benchmark.

The jars come from tests/broker/pom.xml, resolved on first use into tests/broker/target/lib
(ignored) with `mvn dependency:copy-dependencies`. `ensure_jars()` raises `BrokerUnavailable`
with the reason when java or mvn is missing or the resolve fails; the test fixture turns that
into a failure, never a skip.

How the broker is configured (said in the README and the benchmark's report): one KRaft node,
PLAINTEXT on 127.0.0.1, `offsets.topic.num.partitions=1` and replication factor 1 (one broker),
`group.initial.rebalance.delay.ms` as the caller asks (the coordinator's tests use the same delay
on both sides), a 256 MiB heap, the serial GC and the log in a temp dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from storage.sql.cluster import random_cluster_id
from tests.support.nodes import ROOT, die_with_parent
from tests.support.ports import free_port

BROKER_DIR = ROOT / "tests" / "broker"
LIB = BROKER_DIR / "target" / "lib"
STAMP = LIB / ".complete"
KAFKA_VERSION = "4.0.0"
DIFF_TOPIC = "diff-topic"  # the topic both sides of the differential suite know
DIFF_TOPIC_PARTITIONS = 4
JVM_OPTS = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]

_lock = threading.Lock()


class BrokerUnavailable(RuntimeError):
    """java/mvn missing, the jars failed to resolve, or the broker did not start."""


def ensure_jars() -> None:
    with _lock:
        missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
        if missing:
            raise BrokerUnavailable(
                f"{' and '.join(missing)} not found on PATH: Apache Kafka's broker needs Java 17+"
                " and Maven 3.8+ (e.g. apt-get install openjdk-17-jdk-headless maven)"
            )
        pom = BROKER_DIR / "pom.xml"
        if STAMP.exists() and STAMP.stat().st_mtime >= pom.stat().st_mtime:
            return
        cmd = [
            "mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={LIB}",
        ]  # fmt: skip
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            raise BrokerUnavailable(f"{' '.join(cmd)} timed out: {e.stdout!r} {e.stderr!r}") from e
        if r.returncode != 0:
            raise BrokerUnavailable(
                f"{' '.join(cmd)} failed (rc={r.returncode}):\n"
                f"{r.stdout[-8000:]}\n{r.stderr[-8000:]}"
            )
        STAMP.write_text("ok\n")


def _java(main_class: str, *args: str) -> list[str]:
    return [
        "java", *JVM_OPTS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp", f"{LIB}/*", main_class, *args,
    ]  # fmt: skip


class KafkaBroker:
    """One Apache Kafka KRaft node on 127.0.0.1; `start()` formats its log dir and waits until
    it answers Metadata with itself as a live broker."""

    def __init__(
        self, workdir: Path, *, initial_rebalance_delay_ms: int = 300, port: int | None = None
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.controller_port = port + 1 if port else free_port()
        self.log_dir = workdir / "kraft-log"
        self.log_path = workdir / "kafka-broker.log"
        self.config_path = workdir / "server.properties"
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def config(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
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
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        fmt = _java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            random_cluster_id(),
            "-c",
            str(self.config_path),
        )
        r = subprocess.run(fmt, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise BrokerUnavailable(f"kafka-storage format failed:\n{r.stdout}\n{r.stderr}")
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            _java("kafka.Kafka", str(self.config_path)),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        self._wait_ready(timeout)

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

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
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
