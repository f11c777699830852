"""The gateway's own bounds (docs/gateway.md, Bounds): a client that never reads cannot make a
node hold the replies it asked for (the broker's are left unread instead), a broker that reads
nothing (SIGSTOPped) cannot make it hold the requests sent to it (the client's are left unread
instead), and a broker frame over 128 MiB closes that broker connection alone."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.record.memory_records import MemoryRecordsBuilder

from app.config import Settings
from app.gateway.upstream import MAX_REPLY_BYTES, UpstreamConfig, open_link
from membership.wire import encode_request
from tests.gateway.test_relay import fetch_request
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import CoordinatorProcess

pytestmark = pytest.mark.timeout(180)

RECORD = 64 * 1024
RECORDS = 256  # 16 MiB on the topic
REQUESTS = 200  # each asks for up to 1 MiB: 200 MiB of replies if nothing held them back
PRODUCES = 120  # 900 KiB each: 105 MiB of requests for a broker that reads none


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_a_client_that_reads_nothing_cannot_grow_the_gateway(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
) -> None:
    producer = Producer({"bootstrap.servers": apache_kafka_broker.bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, value=bytes([i % 256]) * RECORD, partition=0)
    assert producer.flush(60) == 0
    node = gateway_factory()
    assert node.proc is not None
    sock = socket.create_connection(node.address, timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        request = fetch_request(topic, 0, fetch_offset=0)
        baseline = rss_bytes(node.proc.pid)
        for correlation_id in range(REQUESTS):
            sock.sendall(encode_request(request, correlation_id, "never-reads"))
        time.sleep(5)  # the node relays what it reads; the replies pile up where they may
        grown = rss_bytes(node.proc.pid) - baseline
        assert grown < 64 * 1024 * 1024, f"the node grew by {grown / 2**20:.0f} MiB"
        # once the client reads, every reply comes, in order, and the node is still there
        for correlation_id in range(REQUESTS):
            frame = read_frame(sock)
            assert struct.unpack_from(">i", frame)[0] == correlation_id
    finally:
        sock.close()
    assert node.running


async def test_a_broker_frame_over_the_bound_closes_that_link_only() -> None:
    async def oversized(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.2)  # after the link has its owner
        writer.write(struct.pack(">i", MAX_REPLY_BYTES + 1) + b"\0" * 1024)
        await writer.drain()
        await reader.read()  # hold the connection open until the gateway closes it

    server = await asyncio.start_server(oversized, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = UpstreamConfig.from_settings(Settings(upstream_bootstrap=f"127.0.0.1:{port}"))
    lost: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    class Owner:
        def upstream_frame(self, frame: bytes) -> None:
            lost.set_exception(AssertionError("an oversized frame was relayed"))

        def upstream_writable(self, writable: bool) -> None:
            pass

        def upstream_lost(self, reason: str) -> None:
            if not lost.done():
                lost.set_result(reason)

    try:
        link = await open_link(config, ("127.0.0.1", port), None)
        link.owner = Owner()
        reason = await asyncio.wait_for(lost, 10)
        assert f"reply frame of {MAX_REPLY_BYTES + 1} bytes" in reason
        assert link.closed
    finally:
        server.close()
        await server.wait_closed()


def produce_frame(topic: str, correlation_id: int, batch: bytes) -> bytes:
    request = KafkaTestClient.build_request(
        0,
        9,
        transactional_id=None,
        acks=1,
        timeout=60_000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    )
    return encode_request(request, correlation_id, "slow-upstream")


def test_a_stopped_broker_holds_its_clients_sends(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
) -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=2**21)
    builder.append(timestamp=None, key=None, value=b"v" * (900 * 1024), headers=[])
    builder.close()
    batch = bytes(builder.buffer())
    node = gateway_factory()
    assert node.proc is not None and apache_kafka_broker.proc is not None
    sock = socket.create_connection(node.address, timeout=120)
    sock.sendall(produce_frame(topic, 0, batch))  # the link is up and the broker answers
    assert struct.unpack_from(">i", read_frame(sock))[0] == 0
    frames = [produce_frame(topic, i, batch) for i in range(1, 1 + PRODUCES)]
    sent = []

    def send_all() -> None:
        for frame in frames:
            sock.sendall(frame)
            sent.append(frame)

    sender = threading.Thread(target=send_all, daemon=True)
    broker_pid = apache_kafka_broker.proc.pid
    os.kill(broker_pid, signal.SIGSTOP)
    try:
        baseline = rss_bytes(node.proc.pid)
        sender.start()
        time.sleep(6)
        grown = rss_bytes(node.proc.pid) - baseline
        assert grown < 64 * 1024 * 1024, f"the node grew by {grown / 2**20:.0f} MiB"
        assert len(sent) < PRODUCES, "the node read every request while its broker read none"
    finally:
        os.kill(broker_pid, signal.SIGCONT)
    sender.join(120)
    assert len(sent) == PRODUCES
    for correlation_id in range(1, 1 + PRODUCES):
        frame = read_frame(sock)
        assert struct.unpack_from(">i", frame)[0] == correlation_id
    sock.close()
    assert node.running
