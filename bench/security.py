"""Figure 8 (issue 12): what security costs, measured against PLAINTEXT and TLS in the same run.

Method. One `coordinator serve` (SQLite) with SASL_SSL, SSL, SASL_PLAINTEXT and PLAINTEXT
listeners (tests/support/secure.py: trustme certificates, ECDSA P-256; COORD_AUTHORIZER=acl;
COORD_SSL_CLIENT_AUTH=none, as a SASL_SSL-only deployment sets it). User `bench` is made by
`coordinator users set` (SCRAM-SHA-256 and SCRAM-SHA-512, 4096 iterations) and the same ACLs
(READ on every group and topic) are given to User:bench and to User:ANONYMOUS, the PLAINTEXT
principal: both listeners go through the same authorizer, so the ratios are TLS and SASL alone.

(a) Heartbeats. Figure 1's load (bench/heartbeats.py: its Stable groups of 10 static members,
pre-encoded Heartbeat v4 frames, closed-loop `_LoadConn` over `worker_processes()` processes,
2%-wide latency buckets) on connections opened by KafkaTestClient over PLAINTEXT, or over
SASL_SSL (TLS 1.3, SaslHandshake, SCRAM-SHA-256) and then handed to the load protocol. The two
listeners alternate, the order flipped each round; the ratio is the median of the per-round
ratios.

(b) Commits. Figure 3's committers (bench/commits.py's worker: groups of 10 members, each
committing its own partition with its generation in a closed loop, read back with OffsetFetch)
with their client class connecting over SASL_SSL (SCRAM-SHA-256) or PLAINTEXT; fresh groups
each window, listeners alternating.

(c) Authentications/s. C connectors spread over the worker processes, each in a closed loop:
TCP connect, full TLS handshake (no session resumption), SaslHandshake v1, two
SaslAuthenticate v2 (the SCRAM exchange, the server's signature checked), close. A connector
caches the salted password per (salt, iterations), as the node keeps stored keys rather than
passwords, so PBKDF2 runs once per process and not per connection: the load generators measure
the node, not their own hashing (a real client pays ~2 ms of PBKDF2 per connection on top).
Floor: the same connectors against a minimal asyncio (uvloop) TLS echo server in a process of
its own, with the node's server context (app.security.tls.server_context, same certificate
and key): TCP connect, TLS handshake, one 4-byte echo (so the server has finished its side),
close. The node runs handshakes and SCRAM steps on its 2 security threads; the echo server
runs its handshakes on its event loop.

(d) Authentication storm. M members (groups of 10 static members, session timeout 10 s) on
connections of their own, authenticated over SASL_SSL (SCRAM-SHA-256), heartbeat every 100 ms
(one in flight per member, sends spread over the interval) in one process; another process
waits until they have heartbeated alone for a while, then runs storms: 200 clients connect
to the SASL_SSL listener and authenticate with SCRAM-SHA-512 at once (asyncio.gather), stay
connected until the last one is through, then close. The storm's clients share (c)'s salted
password cache (filled by one authentication before the first storm): 200 real clients hash
on 200 machines in parallel and reach the node together, where one Python process hashing 200
times in turn (2.4 ms each) would spread the storm over half a second. A heartbeat whose round
trip overlaps a storm (first connect to last authentication) counts as "during the storm";
the ones sent before the first storm are the "without storm" baseline. Any heartbeat error
(REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, a fenced instance) would mean the storm made the
node lose a member. Node CPU is sampled every 50 ms and read over the same spans.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import math
import os
import secrets
import ssl
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import commits as commits_bench
from bench import heartbeats as hb
from bench.common import (
    run_async,
    run_workers,
    server_process,
    sleep_until,
    start_barrier,
    worker_processes,
)
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate, median
from tests.support.consumer_bytes import assignment, subscription
from tests.support.kafka_client import AuthenticationError, KafkaTestClient

USER, PASSWORD = "bench", "bench-secret-1"
HB_MECHANISM = "SCRAM-SHA-256"  # members and committers over SASL_SSL
STORM_MECHANISM = "SCRAM-SHA-512"
STORM_CLIENTS = 200
STORM_BOUND_MS = 250.0  # issue 12: an authenticated member's Heartbeat p99 during the storm
MEMBERS_PER_GROUP = 10
HEARTBEAT_EVERY_S = 0.1
MEMBER_SESSION_MS = 10_000  # a stalled node would fence the members within the run
TOPIC = "sec"
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


# ==== clients (worker processes) =================================================================


@functools.lru_cache(maxsize=4)
def client_context(cafile: str) -> ssl.SSLContext:
    """The load generators' TLS context: verifies the node's certificate against the test CA."""
    return ssl.create_default_context(cafile=cafile)


async def connect(port: int, security: dict[str, str] | None, client_id: str) -> KafkaTestClient:
    """A KafkaTestClient over PLAINTEXT (security None) or SASL_SSL, authenticated."""
    if not security:
        return await KafkaTestClient.connect("127.0.0.1", port, client_id)
    return await KafkaTestClient.connect(
        "127.0.0.1",
        port,
        client_id,
        ssl=client_context(security["cafile"]),
        sasl=(security["mechanism"], security["user"], security["password"]),
    )


# (hash, user, password, salt, iterations) -> (client key, stored key, server key)
_SCRAM_KEYS: dict[tuple[str, str, str, bytes, int], tuple[bytes, bytes, bytes]] = {}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def scram_authenticate(
    client: KafkaTestClient, mechanism: str, user: str, password: str
) -> None:
    """RFC 5802's client over SaslHandshake v1 + SaslAuthenticate v2, with the salted password
    cached per (salt, iterations) (see (c) in the module doc); checks the server's signature."""
    hf = _HASHES[mechanism]
    shake = await client.request(client.build_request(_SASL_HANDSHAKE, 1, mechanism=mechanism))
    if shake.error_code != 0:
        raise AuthenticationError(f"SaslHandshake: {shake.error_code!r}")
    nonce = secrets.token_urlsafe(18)
    bare = f"n={user},r={nonce}"
    first = await client.request(
        client.build_request(_SASL_AUTHENTICATE, 2, auth_bytes=f"n,,{bare}".encode())
    )
    if first.error_code != 0:
        raise AuthenticationError(f"{first.error_code!r}: {first.error_message}")
    server_first = bytes(first.auth_bytes).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    combined, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
    if not combined.startswith(nonce):
        raise AuthenticationError("server nonce does not extend ours")
    key = (hf, user, password, salt, iterations)
    keys = _SCRAM_KEYS.get(key)
    if keys is None:
        salted = hashlib.pbkdf2_hmac(hf, password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", hf)
        stored = hashlib.new(hf, client_key).digest()
        keys = _SCRAM_KEYS[key] = (client_key, stored, hmac.digest(salted, b"Server Key", hf))
    client_key, stored_key, server_key = keys
    without_proof = f"c=biws,r={combined}"
    message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, message, hf)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = await client.request(
        client.build_request(
            _SASL_AUTHENTICATE, 2, auth_bytes=f"{without_proof},p={_b64(proof)}".encode()
        )
    )
    if final.error_code != 0:
        raise AuthenticationError(f"{final.error_code!r}: {final.error_message}")
    if bytes(final.auth_bytes).decode() != "v=" + _b64(hmac.digest(server_key, message, hf)):
        raise AuthenticationError("wrong server signature")


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One load-generator process (bench.common.run_workers); `kind` says which load."""
    kinds = {
        "heartbeats": _heartbeat_worker,
        "commits": _commit_worker,
        "auth": _auth_worker,
        "members": _members_worker,
        "storm": _storm_worker,
    }
    result: dict[str, Any] = await kinds[args["kind"]](args)
    return result


# ---- (a) heartbeats: Figure 1's closed loop over either listener ---------------------------------


async def _heartbeat_worker(args: dict[str, Any]) -> dict[str, Any]:
    all_frames = json.loads(Path(args["frames_file"]).read_text())
    mine = [[bytes.fromhex(f) for f in conn] for conn in all_frames[args["index"] :: args["of"]]]
    start = float(args["start"])
    to_perf = time.perf_counter() - time.time()
    w_begin = start + float(args["warmup"])
    w_end = w_begin + float(args["window"])
    stats = hb._Stats(w_begin + to_perf, w_end + to_perf)
    clients = await asyncio.gather(
        *(
            connect(args["port"], args["security"], f"hb-{args['index']}-{i}")
            for i in range(len(mine))
        )
    )
    conns: list[hb._LoadConn] = []
    for client, frames in zip(clients, mine, strict=True):
        transport = client._transport  # authenticated: the load protocol takes the connection
        assert transport is not None
        proto = hb._LoadConn(frames, stats)
        transport.set_protocol(proto)
        proto.connection_made(transport)
        conns.append(proto)
    late = time.time() - start
    await sleep_until(start)
    for c in conns:
        c.start()
    await sleep_until(w_begin)
    cpu0 = time.process_time()
    await sleep_until(w_end)
    cpu1 = time.process_time()
    await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), 30)
    for c in conns:
        assert c.transport is not None
        c.transport.close()
    await asyncio.sleep(0.1)  # let the TLS close_notify go out
    return {
        "ok": stats.ok,
        "errors": {str(k): v for k, v in stats.errors.items()},
        "out_of_order": stats.out_of_order,
        "latency": {str(k): v for k, v in stats.latency.items()},
        "cpu": cpu1 - cpu0,
        "late": late,
    }


# seconds from the barrier's setting to the workers' start: spawning, connecting and
# authenticating a worker's connections took more than 3 s on a busy machine
WORKER_BARRIER_S = 5.0


def _too_late(what: str, results: list[dict[str, Any]], warmup: float) -> None:
    """A window whose workers began after it started measured the machine, not the node."""
    late = max(r["late"] for r in results)
    if late > warmup:
        raise RuntimeError(
            f"{what} workers began {late:.1f} s after the barrier, past the start of their "
            "window: the machine was too busy to measure"
        )


def _heartbeat_window(
    port: int,
    pid: int,
    security: dict[str, str] | None,
    frames_file: Path,
    conns: int,
    window: float,
    warmup: float,
) -> hb.Window:
    """heartbeats.measure with this module's worker (the same load protocol, either listener)."""
    procs = min(worker_processes(), conns)
    start = start_barrier(WORKER_BARRIER_S)  # spawn, connect, authenticate before it
    cpu = hb._CpuWindow(pid, start + warmup, start + warmup + window)
    cpu.start()
    base = {"kind": "heartbeats", "port": port, "security": security, "start": start}
    base |= {"frames_file": str(frames_file), "of": procs, "warmup": warmup, "window": window}
    results = run_workers(
        "bench.security",
        [{**base, "index": i} for i in range(procs)],
        timeout=window + warmup + 120,
    )
    cpu.join(5)
    _too_late("heartbeat", results, warmup)
    hist: Counter[int] = Counter()
    errors: Counter[int] = Counter()
    for r in results:
        hist.update({int(k): v for k, v in r["latency"].items()})
        errors.update({int(k): v for k, v in r["errors"].items()})
    return hb.Window(
        rate=sum(r["ok"] for r in results) / window,
        p50=hb._hist_percentile(hist, 50),
        p99=hb._hist_percentile(hist, 99),
        server_cpu=cpu.server,
        loadgen_cpu=[r["cpu"] / window for r in results],
        machine_cpu=cpu.machine,
        errors=dict(errors),
        out_of_order=sum(r["out_of_order"] for r in results),
        late=max(r["late"] for r in results),
        lease_margin=None,
    )


# ---- (b) commits: Figure 3's committers over either listener ------------------------------------


async def _commit_worker(args: dict[str, Any]) -> dict[str, Any]:
    security = args["security"]
    if security:
        base = commits_bench._make_client_class()

        class SecureCommitClient(base):  # type: ignore[valid-type,misc]
            # replies to the authentication arrive before commits.worker sets the real stats
            stats = commits_bench._Stats()

            @classmethod
            async def connect(cls, host: str, port: int, client_id: str = "", **_: Any) -> Any:
                return await super().connect(
                    host,
                    port,
                    client_id,
                    ssl=client_context(security["cafile"]),
                    sasl=(security["mechanism"], security["user"], security["password"]),
                )

        # this process only runs this worker: commits.worker builds its clients from here
        setattr(commits_bench, "_make_client_class", lambda: SecureCommitClient)  # noqa: B010
    return await commits_bench.worker(args)


@dataclass
class CommitWindow:
    rate: float
    p50: float  # ms
    p99: float
    node_cpu: float  # cores
    gen_cpu: float
    verified: int
    committers: int
    errors: dict[str, int]


def _commit_window(
    port: int,
    pid: int,
    security: dict[str, str] | None,
    prefix: str,
    groups: int,
    window: float,
    warmup: float,
    ready: Path,
) -> CommitWindow:
    n_workers = min(worker_processes(), groups)
    ready.mkdir(parents=True, exist_ok=True)
    args = [
        {
            "kind": "commits",
            "security": security,
            "port": port,
            "groups": [f"{prefix}-{g:04d}" for g in range(w, groups, n_workers)],
            "ready_dir": str(ready),
            "index": w,
            "workers": n_workers,
            "warmup": warmup,
            "window": window,
            "node_pid": pid if w == 0 else 0,
        }
        for w in range(n_workers)
    ]
    results = run_workers("bench.security", args, timeout=180)
    hist: dict[int, int] = {}
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
        for b, n in r["lat_hist"]:
            hist[b] = hist.get(b, 0) + n
    seconds = results[0]["seconds"]
    return CommitWindow(
        rate=sum(r["ok"] for r in results) / seconds,
        p50=commits_bench._hist_percentile(hist, 50),
        p99=commits_bench._hist_percentile(hist, 99),
        node_cpu=results[0]["node_cpu"] / seconds,
        gen_cpu=sum(r["cpu"] for r in results) / seconds,
        verified=sum(r["verified"] for r in results),
        committers=groups * commits_bench.MEMBERS,
        errors=dict(errors),
    )


# ---- (c) authentications/s, and the bare TLS handshake floor ------------------------------------


def _bucket(seconds: float) -> int:
    return int(math.log(max(seconds, 1e-6)) * hb._BUCKETS_PER_E)


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
        "from bench.security import serve_tls_echo; "
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


def _auth_window(
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
    cpu = hb._CpuWindow(pid, start + warmup, start + warmup + window)
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
        "bench.security",
        [{**args, "connectors": n} for n in shares if n],
        timeout=window + warmup + 120,
    )
    cpu.join(5)
    hist: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    for r in results:
        hist.update({int(k): v for k, v in r["latency"].items()})
        errors.update(r["errors"])
    _too_late(f"{target} authentication", results, warmup)
    return AuthWindow(
        rate=sum(r["ok"] for r in results) / window,
        p50=hb._hist_percentile(hist, 50),
        p99=hb._hist_percentile(hist, 99),
        server_cpu=cpu.server,
        loadgen_cpu=sum(r["cpu"] / r["busy"] for r in results),
        machine_cpu=cpu.machine,
        errors=dict(errors),
    )


# ---- (d) heartbeating members, and the storm ----------------------------------------------------


async def _form(client: KafkaTestClient, group: str, n: int) -> list[tuple[str, int, str, str]]:
    """n static members of `group` joined and synced on one connection (the leader assigns one
    partition each); (group, generation, member id, instance id) of each."""
    sub = subscription([TOPIC])
    instances = [f"{group}-m{m}" for m in range(n)]
    joins = await asyncio.gather(
        *(
            client.request(
                client.join_group_request(
                    group,
                    protocols=[("range", sub)],
                    session_timeout_ms=MEMBER_SESSION_MS,
                    rebalance_timeout_ms=30_000,
                    group_instance_id=iid,
                    version=9,
                ),
                timeout=60,
            )
            for iid in instances
        )
    )
    generations = {r.generation_id for r in joins}
    if any(r.error_code != 0 for r in joins) or len(generations) != 1:
        raise RuntimeError(f"JoinGroup {group}: {[(r.error_code, r.generation_id) for r in joins]}")
    generation = generations.pop()
    ids = [r.member_id for r in joins]
    leader = joins[0].leader
    plan = {m: assignment({TOPIC: [i % 10]}) for i, m in enumerate(sorted(ids))}
    syncs = await asyncio.gather(
        *(
            client.request(
                client.sync_group_request(
                    group,
                    generation,
                    mid,
                    assignments=plan if mid == leader else None,
                    group_instance_id=iid,
                    version=5,
                ),
                timeout=60,
            )
            for mid, iid in zip(ids, instances, strict=True)
        )
    )
    if any(s.error_code != 0 for s in syncs):
        raise RuntimeError(f"SyncGroup {group}: {[s.error_code for s in syncs]}")
    return [(group, generation, mid, iid) for mid, iid in zip(ids, instances, strict=True)]


async def _members_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Form the groups, heartbeat every 100 ms until the storm process is done (+0.5 s).
    Returns every heartbeat as [wall-clock send time, round trip s, error code]."""
    port, security = int(args["port"]), args["security"]
    groups = int(args["groups"])
    clients = await asyncio.gather(*(connect(port, security, f"member-{g}") for g in range(groups)))
    formed = await asyncio.gather(
        *(_form(c, f"{args['prefix']}-{g}", int(args["per_group"])) for g, c in enumerate(clients))
    )
    hb_start = time.time() + 0.2
    ready, done = Path(args["ready_file"]), Path(args["done_file"])
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps({"hb_start": hb_start}))
    tmp.rename(ready)
    deadline = hb_start + float(args["max_seconds"])
    samples: list[tuple[float, float, int]] = []
    stop = asyncio.Event()
    everyone = [(c, m) for c, ms in zip(clients, formed, strict=True) for m in ms]

    async def member(i: int, client: KafkaTestClient, m: tuple[str, int, str, str]) -> None:
        group, generation, member_id, instance = m
        request = client.heartbeat_request(
            group, generation, member_id, group_instance_id=instance, version=4
        )
        next_send = hb_start + HEARTBEAT_EVERY_S * i / len(everyone)
        while not stop.is_set():
            await sleep_until(next_send)
            sent, t0 = time.time(), time.perf_counter()
            reply = await client.request(request, timeout=60)
            samples.append((sent, time.perf_counter() - t0, int(reply.error_code)))
            # the next one when the interval is up, never two in flight (as a consumer)
            next_send = max(next_send + HEARTBEAT_EVERY_S, time.time())

    async def watch() -> None:
        while not done.exists() and time.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        stop.set()

    await asyncio.gather(watch(), *(member(i, c, m) for i, (c, m) in enumerate(everyone)))
    for c in clients:
        with contextlib.suppress(Exception):
            await c.close()
    return {"hb_start": hb_start, "members": len(everyone), "samples": samples}


async def _storm_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Wait for the members, let them heartbeat alone for `calm` s, then run `storms` storms
    of `clients` SASL_SSL clients authenticating at once, `gap` s apart."""
    port, mechanism = int(args["port"]), args["mechanism"]
    ready, done = Path(args["ready_file"]), Path(args["done_file"])
    ctx = client_context(args["cafile"])

    async def one(name: str) -> tuple[KafkaTestClient, float]:
        client = await KafkaTestClient.connect("127.0.0.1", port, name, ssl=ctx)
        try:
            await scram_authenticate(client, mechanism, USER, PASSWORD)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        return client, time.time()

    try:
        # one authentication first: the salted password is computed once for the process, so
        # the storm reaches the node as a burst, as from 200 machines (see (d) above)
        warm, _ = await one("storm-warm-up")
        await warm.close()
        limit = time.monotonic() + 120
        while not ready.exists():
            if time.monotonic() > limit:
                raise TimeoutError("the members never got ready")
            await asyncio.sleep(0.05)
        hb_start = float(json.loads(ready.read_text())["hb_start"])
        next_storm = hb_start + float(args["calm"])
        storms: list[dict[str, Any]] = []
        for s in range(int(args["storms"])):
            await sleep_until(next_storm)
            begin = time.time()
            got = await asyncio.gather(
                *(one(f"storm-{s}-{i}") for i in range(int(args["clients"]))),
                return_exceptions=True,
            )
            ok = [g for g in got if isinstance(g, tuple)]
            failed = Counter(type(g).__name__ for g in got if isinstance(g, BaseException))
            end = max([t for _, t in ok], default=time.time())
            times = sorted(t - begin for _, t in ok)
            await asyncio.gather(*(c.close() for c, _ in ok), return_exceptions=True)
            storms.append(
                {
                    "start": begin,
                    "end": end,
                    "authenticated": len(ok),
                    "failed": dict(failed),
                    "p50_s": times[len(times) // 2] if times else None,
                    "last_s": times[-1] if times else None,
                }
            )
            next_storm = time.time() + float(args["gap"])
    finally:
        done.write_text("done")
    return {"storms": storms}


def _summary(rtts: list[float]) -> dict[str, Any]:
    rtts = sorted(rtts)
    if not rtts:
        return {"heartbeats": 0, "p50_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan}
    return {
        "heartbeats": len(rtts),
        "p50_ms": 1000 * rtts[len(rtts) // 2],
        "p99_ms": 1000 * rtts[min(len(rtts) - 1, math.ceil(0.99 * len(rtts)) - 1)],
        "max_ms": 1000 * rtts[-1],
    }


def storm_window(
    port: int,
    cafile: Path,
    workdir: Path,
    *,
    groups: int,
    per_group: int = MEMBERS_PER_GROUP,
    calm: float,
    storms: int,
    clients: int = STORM_CLIENTS,
    gap: float = 1.0,
    member_mechanism: str = HB_MECHANISM,
    storm_mechanism: str = STORM_MECHANISM,
    prefix: str = "storm-members",
    node_pid: int | None = None,
    admin_url: str | None = None,
) -> dict[str, Any]:
    """Members heartbeating over SASL_SSL (one process) through `storms` authentication storms
    (another process); heartbeat round trips without and during the storms, and every error.
    With `node_pid`, the node's CPU (cores) without and during the storms too; with
    `admin_url`, its event-loop lag readings over the whole run (/metrics)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready, done = workdir / f"{prefix}.ready", workdir / f"{prefix}.done"
    for f in (ready, done):
        f.unlink(missing_ok=True)
    security = {"cafile": str(cafile), "mechanism": member_mechanism, "user": USER,
                "password": PASSWORD}  # fmt: skip
    common: dict[str, Any] = {"port": port, "ready_file": str(ready), "done_file": str(done)}
    members_args: dict[str, Any] = {"kind": "members", "security": security, "groups": groups,
                                    "per_group": per_group, "prefix": prefix,
                                    "max_seconds": calm + 90}  # fmt: skip
    storm_args: dict[str, Any] = {"kind": "storm", "cafile": str(cafile),
                                  "mechanism": storm_mechanism, "calm": calm, "storms": storms,
                                  "clients": clients, "gap": gap}  # fmt: skip
    sampler = _CpuSampler(node_pid) if node_pid else None
    lag0 = _loop_lag(admin_url) if admin_url else None
    if sampler is not None:
        sampler.start()
    try:
        members, storm = run_workers(
            "bench.security", [{**common, **members_args}, {**common, **storm_args}], timeout=180
        )
    finally:
        if sampler is not None:
            sampler.stop = True
            sampler.join(5)
    lag = None
    if admin_url and lag0 is not None:
        lag1 = _loop_lag(admin_url)
        lag = {le: lag1[le] - lag0.get(le, 0.0) for le in lag1}
    spans = [(s["start"], s["end"]) for s in storm["storms"]]
    first = spans[0][0] if spans else math.inf
    calm_rtts: list[float] = []
    storm_rtts: list[float] = []
    errors: Counter[int] = Counter()
    for sent, rtt, code in members["samples"]:
        errors[code] += 1
        if any(sent < e and sent + rtt > s for s, e in spans):
            storm_rtts.append(rtt)
        elif sent + rtt < first and sent >= members["hb_start"] + 0.5:
            calm_rtts.append(rtt)
    return {
        "members": members["members"],
        "calm": _summary(calm_rtts),
        "storm": _summary(storm_rtts),
        "errors": {str(k): v for k, v in sorted(errors.items())},
        "storms": storm["storms"],
        "node_cpu": None
        if sampler is None
        else {
            "calm": sampler.cores([(members["hb_start"] + 0.5, first)]),
            "storm": sampler.cores(spans),
        },
        "loop_lag": lag,
    }


def _loop_lag(admin_url: str) -> dict[str, float]:
    """The node's event-loop lag histogram (cumulative counts by upper bound, seconds)."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = "coordinator_event_loop_lag_seconds_bucket{"
    return {
        line.split('le="', 1)[1].split('"', 1)[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def lag_text(lag: dict[str, float] | None) -> str:
    """'N readings, M over 10 ms, the largest ≤ X ms' of a loop-lag histogram delta."""
    if not lag:
        return "no loop-lag readings"
    bounds = sorted((float(le), n) for le, n in lag.items())
    total = bounds[-1][1]
    over10 = total - dict(bounds).get(0.01, total)
    largest = next((le for le, n in bounds if n >= total), math.inf)
    top = "?" if math.isinf(largest) else f"{1000 * largest:g} ms"
    return f"{total:.0f} readings, {over10:.0f} over 10 ms, the largest ≤ {top}"


class _CpuSampler(threading.Thread):
    """(wall time, CPU seconds) of a process every 50 ms; `cores(spans)` its CPU over spans."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            with contextlib.suppress(OSError):
                self.samples.append((time.time(), hb._proc_cpu(self.pid)))
            time.sleep(0.05)

    def cores(self, spans: list[tuple[float, float]]) -> float:
        used = elapsed = 0.0
        for begin, end in spans:
            inside = [c for c in self.samples if begin <= c[0] <= end]
            before = [c for c in self.samples if c[0] < begin][-1:]
            after = [c for c in self.samples if c[0] > end][:1]
            pts = before + inside + after  # the samples around the span: it is often < 0.1 s
            if len(pts) >= 2:
                used += pts[-1][1] - pts[0][1]
                elapsed += pts[-1][0] - pts[0][0]
        return used / elapsed if elapsed else math.nan


# ==== the node and the figure =====================================================================


@dataclass
class Setup:
    node: Any  # tests.support.secure.SecureNode
    cafile: Path
    certfile: Path
    keyfile: Path

    @property
    def pid(self) -> int:
        assert self.node.proc is not None
        return int(self.node.proc.pid)

    def port(self, protocol: str) -> int:
        return int(self.node.ports[protocol])

    def security(self, mechanism: str = HB_MECHANISM) -> dict[str, str]:
        return {"cafile": str(self.cafile), "mechanism": mechanism, "user": USER,
                "password": PASSWORD}  # fmt: skip


@contextlib.contextmanager
def secure_bench_node(workdir: Path, **env: str) -> Iterator[Setup]:
    """SecureNode on SQLite with user `bench`, and READ on every group and topic for User:bench
    and User:ANONYMOUS (the PLAINTEXT principal)."""
    from tests.support.secure import SecureNode, add_acl, make_certificates, set_user

    workdir.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite+aiosqlite:///{workdir / 'coordinator.db'}"
    certs = make_certificates(workdir / "certs")
    set_user(db_url, USER, PASSWORD, *_HASHES)
    for principal in (f"User:{USER}", "User:ANONYMOUS"):
        for rtype in ("GROUP", "TOPIC"):
            add_acl(db_url, f"--principal={principal}", "--operation=READ",
                    f"--resource-type={rtype}", "--resource-name=*")  # fmt: skip
    env.setdefault("COORD_LOG_LEVEL", "WARNING")
    node = SecureNode(db_url, workdir, certs, env)
    node.start()
    try:
        yield Setup(node, certs.cafile, certs.certfile, certs.keyfile)
    finally:
        node.stop()


def _errors_of(*counters: dict[Any, int]) -> str:
    total: Counter[str] = Counter()
    for c in counters:
        total.update({str(k): v for k, v in c.items()})
    return ", ".join(f"{k} x{v}" for k, v in sorted(total.items())) or "0"


def _method() -> str:
    paragraphs = (__doc__ or "").strip().split("\n\n")[1:]
    return "\n\n".join(p.replace("\n", " ") for p in paragraphs)


def run(opts: BenchOptions) -> Figure:
    smoke = opts.smoke
    hb_groups = 10 if smoke else 100
    commit_groups = 10 if smoke else 100
    window = 1.5 if smoke else 6.0
    warmup = 0.3 if smoke else 1.0
    hb_rounds = 1 if smoke else 3
    commit_rounds = 1 if smoke else 2
    auth_rounds = 1 if smoke else 3
    connectors = 16 if smoke else 32
    storm_groups = 2 if smoke else 10
    storms = 1 if smoke else 5
    calm = 2.0 if smoke else 5.0
    workdir = opts.workdir / "security"
    started = time.time()
    hb_w: dict[str, list[hb.Window]] = {"PLAINTEXT": [], "SASL_SSL": []}
    cm_w: dict[str, list[CommitWindow]] = {"PLAINTEXT": [], "SASL_SSL": []}
    auth_w: dict[str, list[AuthWindow]] = {"echo": [], "SCRAM-SHA-256": [], "SCRAM-SHA-512": []}
    with secure_bench_node(
        workdir,
        COORD_TOPICS=f"{hb.TOPIC}:{hb.MEMBERS_PER_GROUP},{commits_bench.TOPIC}:"
        f"{commits_bench.MEMBERS},{TOPIC}:10",
        COORD_INITIAL_REBALANCE_DELAY_MS="300",
        COORD_LOG_PARTITIONS="16",
        COORD_SSL_CLIENT_AUTH="none",
    ) as s:
        sec: dict[str, dict[str, str] | None] = {"PLAINTEXT": None, "SASL_SSL": s.security()}
        # (a) heartbeats
        frames, _ = run_async(hb.form_groups(s.port("PLAINTEXT"), hb_groups))
        frames_file = workdir / "heartbeat-frames.json"
        frames_file.write_text(json.dumps([[f.hex() for f in conn] for conn in frames]))
        order = ["PLAINTEXT", "SASL_SSL"]
        for r in range(hb_rounds):
            for proto in order if r % 2 == 0 else order[::-1]:
                hb_w[proto].append(
                    _heartbeat_window(
                        s.port(proto), s.pid, sec[proto], frames_file, hb_groups, window, warmup
                    )
                )
        # (b) commits
        for r in range(commit_rounds):
            for proto in order if r % 2 == 0 else order[::-1]:
                cm_w[proto].append(
                    _commit_window(
                        s.port(proto), s.pid, sec[proto], f"sec-commits-{proto.lower()}-{r}",
                        commit_groups, window, warmup, workdir / f"ready-{proto}-{r}",
                    )
                )  # fmt: skip
        # (c) authentications/s against the bare TLS handshake floor
        with tls_echo_server(s.certfile, s.keyfile) as (echo_port, echo_pid):
            targets = ["echo", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            for r in range(auth_rounds):
                for t in targets if r % 2 == 0 else targets[::-1]:
                    if t == "echo":
                        w = _auth_window("echo", echo_port, echo_pid, s.cafile, "", connectors,
                                         window, warmup)  # fmt: skip
                    else:
                        w = _auth_window("node", s.port("SASL_SSL"), s.pid, s.cafile, t,
                                         connectors, window, warmup)  # fmt: skip
                    auth_w[t].append(w)
        # (d) the storm
        storm = storm_window(
            s.port("SASL_SSL"), s.cafile, workdir, groups=storm_groups, calm=calm, storms=storms,
            node_pid=s.pid, admin_url=s.node.admin_url,
        )  # fmt: skip
        alive = s.node.running

    # ---- the table ----
    def ratio(of: dict[str, list[Any]], what: str) -> list[float]:
        if not all(b.rate > 0 for b in of["PLAINTEXT"]):
            # a floor of nothing is no floor: say so rather than divide by it
            raise RuntimeError(
                f"the PLAINTEXT {what} floor measured nothing in a window "
                f"({[b.rate for b in of['PLAINTEXT']]}/s, errors "
                f"{[b.errors for b in of['PLAINTEXT']]})"
            )
        pairs = zip(of["SASL_SSL"], of["PLAINTEXT"], strict=True)
        return [a.rate / b.rate for a, b in pairs]

    def med(ws: list[Any], attr: str) -> float:
        return median([getattr(w, attr) for w in ws])

    hb_r, cm_r = median(ratio(hb_w, "heartbeat")), median(ratio(cm_w, "commit"))
    if not all(e.rate > 0 for e in auth_w["echo"]):
        # a floor of nothing is no floor: say so rather than divide by it
        raise RuntimeError(
            "the TLS handshake floor completed no handshake in a window "
            f"({[e.rate for e in auth_w['echo']]}/s, errors "
            f"{[e.errors for e in auth_w['echo']]})"
        )
    auth_r = {
        m: median([a.rate / e.rate for a, e in zip(auth_w[m], auth_w["echo"], strict=True)])
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    }
    calm_p99, storm_p99 = storm["calm"]["p99_ms"], storm["storm"]["p99_ms"]
    storm_ratio = storm_p99 / calm_p99
    members = storm["members"]
    n_storms = len(storm["storms"])
    authenticated = sum(x["authenticated"] for x in storm["storms"])
    attempted = STORM_CLIENTS * len(storm["storms"])
    hb_errors = {k: v for k, v in storm["errors"].items() if k != "0"}

    def hb_cell(ws: list[hb.Window]) -> str:
        return (f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(1e3 * med(ws, 'p50'))}, "
                f"p99 {fmt_ms(1e3 * med(ws, 'p99'))}")  # fmt: skip

    def cm_cell(ws: list[CommitWindow]) -> str:
        return f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(med(ws, 'p50'))}, " \
               f"p99 {fmt_ms(med(ws, 'p99'))}"  # fmt: skip

    def auth_cell(ws: list[AuthWindow]) -> str:
        return (f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(1e3 * med(ws, 'p50'))}, "
                f"p99 {fmt_ms(1e3 * med(ws, 'p99'))}")  # fmt: skip

    def cpu(a: list[Any], b: list[Any], attr: str = "server_cpu") -> str:
        return f"{fmt_pct(med(a, attr))} / {fmt_pct(med(b, attr))}"

    hb_errs = _errors_of(*(w.errors for ws in hb_w.values() for w in ws))
    cm_errs = _errors_of(*(w.errors for ws in cm_w.values() for w in ws))
    verified = sum(w.verified for ws in cm_w.values() for w in ws)
    committers = sum(w.committers for ws in cm_w.values() for w in ws)
    rows = [
        [
            f"(a) Heartbeats/s, {hb_groups * hb.MEMBERS_PER_GROUP} members over {hb_groups} "
            "connections",
            f"PLAINTEXT: {hb_cell(hb_w['PLAINTEXT'])}",
            f"SASL_SSL: {hb_cell(hb_w['SASL_SSL'])}",
            fmt_pct(hb_r),
            cpu(hb_w["PLAINTEXT"], hb_w["SASL_SSL"]),
            hb_errs,
        ],
        [
            f"(b) OffsetCommits/s, {commit_groups * commits_bench.MEMBERS} committers over "
            f"{commit_groups} connections",
            f"PLAINTEXT: {cm_cell(cm_w['PLAINTEXT'])}",
            f"SASL_SSL: {cm_cell(cm_w['SASL_SSL'])}",
            fmt_pct(cm_r),
            cpu(cm_w["PLAINTEXT"], cm_w["SASL_SSL"], "node_cpu"),
            f"{cm_errs}; read back {verified}/{committers}",
        ],
    ]
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        rows.append(
            [
                f"(c) {m} authentications/s (TLS + SASL), {connectors} connectors",
                f"bare TLS handshakes, asyncio echo: {auth_cell(auth_w['echo'])}",
                f"node SASL_SSL: {auth_cell(auth_w[m])}",
                fmt_pct(auth_r[m]),
                cpu(auth_w["echo"], auth_w[m]),
                _errors_of(*(w.errors for w in auth_w[m] + auth_w["echo"])),
            ]
        )
    rows.append(
        [
            f"(d) Heartbeat p99, {members} SASL_SSL members, {n_storms} "
            f"storm{'s' if n_storms != 1 else ''} of {STORM_CLIENTS} {STORM_MECHANISM} clients",
            f"without storm: p99 {fmt_ms(calm_p99)} (p50 {fmt_ms(storm['calm']['p50_ms'])}, "
            f"{storm['calm']['heartbeats']:,} heartbeats)",
            f"during storms: p99 {fmt_ms(storm_p99)} (p50 {fmt_ms(storm['storm']['p50_ms'])}, "
            f"max {fmt_ms(storm['storm']['max_ms'])}, {storm['storm']['heartbeats']:,} "
            "heartbeats)",
            f"{storm_ratio:.1f}x",
            f"{fmt_pct(storm['node_cpu']['calm'])} / {fmt_pct(storm['node_cpu']['storm'])}",
            f"{authenticated}/{attempted} authenticated; heartbeat errors {_errors_of(hb_errors)}",
        ]
    )
    bound = "under" if storm_p99 <= STORM_BOUND_MS else "OVER"
    verdict = (
        f"SASL_SSL/PLAINTEXT: heartbeats {fmt_pct(hb_r)}, commits {fmt_pct(cm_r)}; "
        f"SCRAM-SHA-256 {fmt_rate(med(auth_w['SCRAM-SHA-256'], 'rate'))} auth/s = "
        f"{fmt_pct(auth_r['SCRAM-SHA-256'])} and SCRAM-SHA-512 "
        f"{fmt_rate(med(auth_w['SCRAM-SHA-512'], 'rate'))} auth/s = "
        f"{fmt_pct(auth_r['SCRAM-SHA-512'])} of bare TLS handshakes "
        f"({fmt_rate(med(auth_w['echo'], 'rate'))}/s); storm: member Heartbeat p99 "
        f"{fmt_ms(storm_p99)} vs {fmt_ms(calm_p99)} without = {storm_ratio:.1f}x, {bound} the "
        f"{STORM_BOUND_MS:.0f} ms bound, {authenticated}/{attempted} authenticated, "
        f"{'no heartbeat errors' if not hb_errors else 'heartbeat errors ' + str(hb_errors)}"
        f"{'' if alive else '; node DEAD'}"
    )
    notes = [
        f"{hb_rounds} heartbeat round(s) and {commit_rounds} commit round(s) of {window:g} s "
        f"windows after {warmup:g} s warm-up, PLAINTEXT and SASL_SSL alternating; "
        f"{auth_rounds} round(s) of authentication windows (echo floor, SCRAM-SHA-256, "
        "SCRAM-SHA-512, order flipped each round); medians shown. Node CPU: cores (100% = one) "
        "over the window, all its threads (the security threads included).",
        "per round, heartbeats/s SASL_SSL / PLAINTEXT (machine busy, cores of 2, the node "
        "and its load generators included): "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} ({fmt_pct(a.rate / b.rate)}; "
            f"{a.machine_cpu:.2f} / {b.machine_cpu:.2f})"
            for a, b in zip(hb_w["SASL_SSL"], hb_w["PLAINTEXT"], strict=True)
        ),
        "per round, commits/s SASL_SSL / PLAINTEXT: "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} ({fmt_pct(a.rate / b.rate)})"
            for a, b in zip(cm_w["SASL_SSL"], cm_w["PLAINTEXT"], strict=True)
        ),
        "authentication windows, medians in cores, server / load generators / the rest (kernel "
        "networking: connect, TLS, close for every authentication; other processes) "
        f"(machine {os.cpu_count()} cores): "
        + ", ".join(
            f"{t} {med(ws, 'server_cpu'):.2f} / {med(ws, 'loadgen_cpu'):.2f} / "
            f"{max(0.0, med(ws, 'machine_cpu') - med(ws, 'server_cpu') - med(ws, 'loadgen_cpu')):.2f}"  # noqa: E501
            for t, ws in auth_w.items()
        )
        + ": the connectors share the machine with the server; per round, auth/s "
        "SCRAM-SHA-256 / SCRAM-SHA-512 / echo: "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} / {fmt_rate(e.rate)}"
            for a, b, e in zip(
                auth_w["SCRAM-SHA-256"], auth_w["SCRAM-SHA-512"], auth_w["echo"], strict=True
            )
        )
        + ".",
        "storms: "
        + "; ".join(
            f"{x['authenticated']}/{STORM_CLIENTS} authenticated in {1e3 * (x['end'] - x['start']):.0f} ms"  # noqa: E501
            + (f" (failed: {x['failed']})" if x["failed"] else "")
            for x in storm["storms"]
        )
        + f"; members: {storm_groups} groups of {MEMBERS_PER_GROUP} static members, one "
        f"SASL_SSL connection per group, session timeout {MEMBER_SESSION_MS // 1000} s. "
        "The node's event-loop lag, read every 50 ms by its listener (/metrics), over the "
        f"whole storm run (formation, baseline, storms, gaps): {lag_text(storm['loop_lag'])}.",
        "Audit lines (one per authentication) are off in this run, as every figure runs its "
        "node at COORD_LOG_LEVEL=WARNING.",
    ]
    return Figure(
        key="security",
        title="8. Security: SASL_SSL vs PLAINTEXT, SCRAM authentications/s, an authentication "
        "storm",
        goal="issue 12 asks for the ratios (heartbeats/s and commits/s over SASL_SSL vs "
        "PLAINTEXT, SCRAM authentications/s) and sets one bound: an authenticated member's "
        f"Heartbeat p99 ≤ {STORM_BOUND_MS:.0f} ms while {STORM_CLIENTS} clients authenticate "
        "at once",
        columns=[
            "measure",
            "baseline (same run)",
            "secured",
            "ratio",
            "server CPU (baseline / secured)",
            "errors",
        ],
        rows=rows,
        verdict=verdict,
        method=_method(),
        notes=notes,
        seconds=time.time() - started,
    )
