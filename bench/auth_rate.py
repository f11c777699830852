"""Figure 8 (c): SCRAM authentications/s against the node, and the floor of bare TLS handshakes
against an asyncio echo server with the node's server context (bench/security.py says how)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    run_async,
    run_workers,
    server_process,
    sleep_until,
    start_barrier,
    worker_processes,
)
from bench.generators import BUCKETS_PER_E, heartbeat_percentile
from bench.probes import CpuWindow
from bench.secure_node import (
    PASSWORD,
    USER,
    WORKER_BARRIER_S,
    client_context,
    scram_authenticate,
    too_late,
)
from tests.support.kafka_client import KafkaTestClient


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One process of connectors (bench.common.run_workers)."""
    return await _auth_worker(args)


def _bucket(seconds: float) -> int:
    return int(math.log(max(seconds, 1e-6)) * BUCKETS_PER_E)


async def _auth_worker(args: dict[str, Any]) -> dict[str, Any]:
    port, target = int(args["port"]), args["target"]
    ctx = client_context(args["cafile"])
    mechanism = args.get("mechanism", "")
    start = float(args["start"])
    to_perf = time.perf_counter() - time.time()
    w0 = start + float(args["warmup"]) + to_perf
    w1 = w0 + float(args["window"])
    ok = 0
    errors: Counter[str] = Counter()
    latency: Counter[int] = Counter()

    async def node_once(i: int) -> float:
        t0 = time.perf_counter()
        client = await KafkaTestClient.connect("127.0.0.1", port, f"auth-{i}", ssl=ctx)
        try:
            await scram_authenticate(client, mechanism, USER, PASSWORD)
            return time.perf_counter() - t0
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def echo_once(i: int) -> float:
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
        )
        try:
            writer.write(b"ping")
            if await reader.readexactly(4) != b"ping":
                raise RuntimeError("echo mismatch")
            return time.perf_counter() - t0
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 5)

    once = node_once if target == "node" else echo_once

    async def connector(i: int) -> None:
        nonlocal ok
        while time.perf_counter() < w1:
            try:
                took = await asyncio.wait_for(once(i), 30)
            except Exception as e:
                errors[type(e).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            done = time.perf_counter()
            if w0 <= done < w1:
                ok += 1
                latency[_bucket(took)] += 1

    late = time.time() - start
    await sleep_until(start)
    cpu0 = time.process_time()
    await asyncio.gather(*(connector(i) for i in range(int(args["connectors"]))))
    cpu1 = time.process_time()
    return {
        "ok": ok,
        "errors": dict(errors),
        "latency": {str(k): v for k, v in latency.items()},
        "cpu": cpu1 - cpu0,
        "busy": time.perf_counter() - (start + to_perf),
        "late": late,
    }


class _TlsEcho(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


def serve_tls_echo(port: int, certfile: str, keyfile: str) -> None:
    """The floor of (c): an asyncio TLS echo server with the node's server context."""
    from app.security.tls import server_context

    async def main() -> None:
        context = server_context(certfile, keyfile)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_TlsEcho, "127.0.0.1", port, ssl=context, backlog=1024)
        print("ready", flush=True)
        await server.serve_forever()

    run_async(main())


@contextlib.contextmanager
def tls_echo_server(certfile: Path, keyfile: Path) -> Iterator[tuple[int, int]]:
    """(port, pid) of a `serve_tls_echo` process, stopped on exit."""
    code = (
        "from bench.auth_rate import serve_tls_echo; "
        f"serve_tls_echo({{port}}, {str(certfile)!r}, {str(keyfile)!r})"
    )
    with server_process(code, "TLS echo server") as server:
        yield server


@dataclass
class AuthWindow:
    rate: float  # completed authentications (or echoed handshakes) per second
    p50: float  # seconds, connect to authenticated
    p99: float
    server_cpu: float  # cores
    loadgen_cpu: float  # cores, all worker processes
    machine_cpu: float
    errors: dict[str, int]


def auth_window(
    target: str,
    port: int,
    pid: int,
    cafile: Path,
    mechanism: str,
    connectors: int,
    window: float,
    warmup: float,
) -> AuthWindow:
    procs = worker_processes()
    # the workers import the client stack before the barrier: under the smoke test's parallel
    # figures (JVMs starting) that took longer than 2 s, and a window that closed before they
    # began counted nothing
    start = start_barrier(WORKER_BARRIER_S)
    cpu = CpuWindow(pid, start + warmup, start + warmup + window)
    cpu.start()
    args = {
        "kind": "auth",
        "target": target,
        "port": port,
        "cafile": str(cafile),
        "mechanism": mechanism,
        "start": start,
        "warmup": warmup,
        "window": window,
    }
    shares = [connectors // procs + (1 if i < connectors % procs else 0) for i in range(procs)]
    results = run_workers(
        "bench.auth_rate",
        [{**args, "connectors": n} for n in shares if n],
        timeout=window + warmup + 120,
    )
    cpu.join(5)
    hist: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    for r in results:
        hist.update({int(k): v for k, v in r["latency"].items()})
        errors.update(r["errors"])
    too_late(f"{target} authentication", results, warmup)
    return AuthWindow(
        rate=sum(r["ok"] for r in results) / window,
        p50=heartbeat_percentile(hist, 50),
        p99=heartbeat_percentile(hist, 99),
        server_cpu=cpu.server,
        loadgen_cpu=sum(r["cpu"] / r["busy"] for r in results),
        machine_cpu=cpu.machine,
        errors=dict(errors),
    )
