"""Figure 1: Heartbeats/s of 1000 static members over 100 connections, as a ratio to an
echo floor served by the same event loop.

Method. One `coordinator serve` (SQLite) holds topic `hb` (10 partitions). 100 groups of 10
static members (smoke: 10 groups) are formed from the bench process: each member joins once
with a group_instance_id (JoinGroup v9, no MEMBER_ID_REQUIRED round trip, 10-minute session
timeout so nobody expires), the leader syncs a range assignment and the others sync too, so
every group is Stable; one Heartbeat per member checks it and measures the real reply size.
Each member's Heartbeat v4 frame (with its group_instance_id) is encoded once, with a fixed
correlation id per member (replies are in request order on a connection, and checked).

Load. The 10 members of a group share one connection; the connections are spread over
`worker_processes()` OS processes. Every member runs a closed loop (send, await its reply, send
again); replies that arrive in one read are answered with one write (the members on a connection
resend together). All workers start at one `start_barrier()` instant, warm up, then count the
replies with error_code 0 inside the window; any other code or an out-of-order reply fails the
figure. Latency = reply time - send time, in 2%-wide buckets. During the node's windows its
admin /cluster is polled every 0.25 s for the smallest lease margin left (NOT_COORDINATOR is
what a node answers once its partition leases may have lapsed).

Floor. `serve_echo` in its own process: uvloop, asyncio Protocol, 4-byte size framing parsed
like the node's, and for each request frame one reply frame of the size of the node's real
Heartbeat reply (its correlation id, zeros: error_code 0), the replies to one read in one
write. The exact same frames, workers, connections, in-flight count and window drive it.
Node and echo alternate (3 rounds in full mode, the order flipped each round); the ratio is
the median of the per-round ratios. CPU of the server, of the load generators and of the whole
machine (shared: other work shows there) is read from /proc over the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.group.messages import Error
from bench.common import (
    node,
    run_async,
    run_workers,
    server_process,
    sleep_until,
    start_barrier,
    worker_processes,
)
from bench.generators import HB_ERROR_AT, HeartbeatLoad, HeartbeatStats, heartbeat_percentile
from bench.probes import CpuWindow
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate, median
from tests.support.consumer_bytes import assignment, subscription
from tests.support.kafka_client import KafkaTestClient

TOPIC = "hb"
MEMBERS_PER_GROUP = 10
SESSION_TIMEOUT_MS = 600_000  # nobody expires during the run
REBALANCE_TIMEOUT_MS = 60_000
HB_VERSION = 4
_SIZE = struct.Struct(">i")
_ERR = struct.Struct(">h")
GOAL = 0.40


# ---- group formation (bench process) -----------------------------------------------------------


def _check(what: str, code: Any) -> None:
    value = int(getattr(code, "value", code))
    if value != 0:
        raise RuntimeError(f"{what}: error_code {value} ({code})")


async def _form_group(client: KafkaTestClient, group: str) -> tuple[list[bytes], int]:
    """Join + sync MEMBERS_PER_GROUP static members pipelined on one connection; returns
    their pre-encoded Heartbeat frames (correlation id = member index) and the reply size."""
    sub = subscription([TOPIC])
    instances = [f"{group}-m{m}" for m in range(MEMBERS_PER_GROUP)]
    joins = await asyncio.wait_for(
        asyncio.gather(
            *(
                client.send(
                    client.join_group_request(
                        group,
                        protocols=[("range", sub)],
                        session_timeout_ms=SESSION_TIMEOUT_MS,
                        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                        group_instance_id=iid,
                        version=9,
                    )
                )
                for iid in instances
            )
        ),
        60,
    )
    for r in joins:
        _check(f"JoinGroup {group}", r.error_code)
    generation = joins[0].generation_id
    leader = joins[0].leader
    ids = [r.member_id for r in joins]
    if any(r.generation_id != generation for r in joins) or leader not in ids:
        raise RuntimeError(f"JoinGroup {group}: members disagree on generation/leader")
    # range assignor: one partition per member in member-id order
    assignments = {m: assignment({TOPIC: [i]}) for i, m in enumerate(sorted(ids))}
    syncs = await asyncio.wait_for(
        asyncio.gather(
            *(
                client.send(
                    client.sync_group_request(
                        group,
                        generation,
                        mid,
                        assignments=assignments if mid == leader else None,
                        group_instance_id=iid,
                        version=5,
                    )
                )
                for mid, iid in zip(ids, instances, strict=True)
            )
        ),
        60,
    )
    for mid, r in zip(ids, syncs, strict=True):
        _check(f"SyncGroup {group}", r.error_code)
        if r.assignment != assignments[mid]:
            raise RuntimeError(f"SyncGroup {group}: {mid} got another assignment")
    frames = [
        client.encode(
            client.heartbeat_request(
                group, generation, mid, group_instance_id=iid, version=HB_VERSION
            ),
            m,
        )
        for m, (mid, iid) in enumerate(zip(ids, instances, strict=True))
    ]
    # one heartbeat each: the group is Stable, and the real reply size
    replies = [client.expect(m, None) for m in range(len(frames))]
    await client.send_raw(b"".join(frames))
    sizes = set()
    for rest in await asyncio.wait_for(asyncio.gather(*replies), 30):
        payload = 4 + len(rest)  # the correlation id was cut off
        sizes.add(payload)
        (code,) = _ERR.unpack_from(rest, HB_ERROR_AT - 4)
        _check(f"Heartbeat {group}", code)
    if len(sizes) != 1:
        raise RuntimeError(f"Heartbeat replies of several sizes: {sizes}")
    return frames, sizes.pop()


async def form_groups(port: int, groups: int) -> tuple[list[list[bytes]], int]:
    """Every group Stable; per connection (= group) its members' Heartbeat frames."""
    clients = [
        await KafkaTestClient.connect("127.0.0.1", port, client_id=f"hb-{g}") for g in range(groups)
    ]
    try:
        return await form_named_groups(clients, [f"hb-group-{g}" for g in range(groups)])
    finally:
        for c in clients:
            await c.close()


async def form_named_groups(
    clients: list[KafkaTestClient], names: list[str]
) -> tuple[list[list[bytes]], int]:
    """`form_groups` for groups of given names, one per client (bench/scaleout.py places
    them on the node that coordinates them)."""
    got = await asyncio.gather(*(_form_group(c, g) for g, c in zip(names, clients, strict=True)))
    sizes = {size for _, size in got}
    if len(sizes) != 1:
        raise RuntimeError(f"Heartbeat replies of several sizes: {sizes}")
    return [frames for frames, _ in got], sizes.pop()


# ---- the load generator (worker processes) ----------------------------------------------------


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """Drive this worker's share of the connections through one window (see module doc)."""
    loop = asyncio.get_running_loop()
    all_frames = json.loads(Path(args["frames_file"]).read_text())
    mine = [[bytes.fromhex(f) for f in conn] for conn in all_frames[args["index"] :: args["of"]]]
    start = float(args["start"])
    to_perf = time.perf_counter() - time.time()
    w_begin = start + float(args["warmup"])
    w_end = w_begin + float(args["window"])
    stats = HeartbeatStats(w_begin + to_perf, w_end + to_perf)
    conns: list[HeartbeatLoad] = []
    for frames in mine:
        _, proto = await loop.create_connection(
            lambda f=frames: HeartbeatLoad(f, stats), "127.0.0.1", int(args["port"])
        )
        conns.append(proto)
    late = time.time() - start  # > 0: this worker was not ready at the barrier
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
    return {
        "ok": stats.ok,
        "errors": {str(k): v for k, v in stats.errors.items()},
        "out_of_order": stats.out_of_order,
        "latency": {str(k): v for k, v in stats.latency.items()},
        "cpu": cpu1 - cpu0,
        "late": late,
        "members": sum(len(f) for f in mine),
    }


# ---- the echo floor (its own process) ---------------------------------------------------------


class _Echo(asyncio.Protocol):
    """Size-framed requests in; per request one reply of `reply_size` bytes after the size:
    the request's correlation id, then zeros (error_code 0). Parsed like the node's server."""

    def __init__(self, tail: bytes) -> None:
        self.tail = tail
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        head = _SIZE.pack(4 + len(self.tail))
        tail = self.tail
        out = []
        pos, n = 0, len(data)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            end = pos + 4 + size
            if end > n:
                break
            out.append(head + data[pos + 8 : pos + 12] + tail)
            pos = end
        if out:
            # the replies to one read leave in one write, as the node gathers the replies
            # ready in one loop iteration
            self.transport.write(b"".join(out))  # type: ignore[union-attr]
        if pos < n:
            buf += data[pos:]


def serve_echo(port: int, reply_size: int) -> None:
    """Run the echo floor on 127.0.0.1:port until killed; prints 'ready' once listening."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        tail = bytes(reply_size - 4)
        server = await loop.create_server(lambda: _Echo(tail), "127.0.0.1", port)
        print("ready", flush=True)
        await server.serve_forever()

    run_async(main())


@contextlib.contextmanager
def echo_server(reply_size: int) -> Iterator[tuple[int, int]]:
    """(port, pid) of a `serve_echo` process, killed on exit."""
    code = f"from bench.heartbeats import serve_echo; serve_echo({{port}}, {reply_size})"
    with server_process(code, "echo server") as server:
        yield server


# ---- one measured window ----------------------------------------------------------------------


class _LeaseWatch(threading.Thread):
    """Polls a node's /cluster over the window: the smallest lease margin left (ms)."""

    def __init__(self, admin_url: str, t0: float, t1: float) -> None:
        super().__init__(daemon=True)
        self.url, self.t0, self.t1 = admin_url + "/cluster", t0, t1
        self.min_margin: float | None = None

    def run(self) -> None:
        time.sleep(max(0.0, self.t0 - time.time()))
        while time.time() < self.t1:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    view = json.loads(r.read())
                margins = [
                    p["lease_expires_in_ms"]
                    for p in view["partitions"]
                    if p["lease_expires_in_ms"] is not None
                ]
                if margins:
                    low = min(margins)
                    self.min_margin = low if self.min_margin is None else min(low, self.min_margin)
            time.sleep(0.25)


@dataclass
class Window:
    rate: float  # replies with error_code 0 per second
    p50: float  # seconds
    p99: float
    server_cpu: float  # cores
    loadgen_cpu: list[float]  # cores, per worker process
    machine_cpu: float  # cores busy on the whole machine
    errors: dict[int, int]
    out_of_order: int
    late: float  # worst worker lateness at the barrier, seconds
    lease_margin: float | None  # node only: smallest lease margin seen, ms


def measure(
    port: int,
    pid: int,
    frames_file: Path,
    conns: int,
    window: float,
    warmup: float,
    admin_url: str | None = None,
) -> Window:
    """One window of the closed-loop load against the server at `port` (process `pid`)."""
    procs = min(worker_processes(), conns)
    start = start_barrier(2.0)  # time to spawn the workers and connect
    cpu = CpuWindow(pid, start + warmup, start + warmup + window)
    cpu.start()
    lease = None
    if admin_url is not None:
        lease = _LeaseWatch(admin_url, start + warmup, start + warmup + window)
        lease.start()
    results = run_workers(
        "bench.heartbeats",
        [
            {
                "port": port,
                "frames_file": str(frames_file),
                "index": i,
                "of": procs,
                "start": start,
                "warmup": warmup,
                "window": window,
            }
            for i in range(procs)
        ],
        timeout=window + warmup + 120,
    )
    cpu.join(5)
    if lease is not None:
        lease.join(10)
    hist: Counter[int] = Counter()
    errors: Counter[int] = Counter()
    for r in results:
        hist.update({int(k): v for k, v in r["latency"].items()})
        errors.update({int(k): v for k, v in r["errors"].items()})
    ok = sum(r["ok"] for r in results)
    return Window(
        rate=ok / window,
        p50=heartbeat_percentile(hist, 50),
        p99=heartbeat_percentile(hist, 99),
        server_cpu=cpu.server,
        loadgen_cpu=[r["cpu"] / window for r in results],
        machine_cpu=cpu.machine,
        errors=dict(errors),
        out_of_order=sum(r["out_of_order"] for r in results),
        late=max(r["late"] for r in results),
        lease_margin=None if lease is None else lease.min_margin,
    )


# ---- the figure -------------------------------------------------------------------------------


def _row(name: str, ws: list[Window], ratio: str) -> list[str]:
    errors = sum(sum(w.errors.values()) + w.out_of_order for w in ws)
    lg = [c for w in ws for c in w.loadgen_cpu]
    return [
        name,
        fmt_rate(median([w.rate for w in ws])),
        ratio,
        fmt_ms(1e3 * median([w.p50 for w in ws])),
        fmt_ms(1e3 * median([w.p99 for w in ws])),
        fmt_pct(median([w.server_cpu for w in ws])),
        f"{len(ws[0].loadgen_cpu)} x {fmt_pct(median(lg))} (max {fmt_pct(max(lg))})",
        f"{median([w.machine_cpu for w in ws]):.2f} / {os.cpu_count()}",
        str(errors),
    ]


def _errors_text(errors: dict[int, int], disorder: int) -> str:
    def name(code: int) -> str:
        try:
            return Error(code).name
        except ValueError:
            return f"error {code}"

    parts = [f"{name(c)} x{n}" for c, n in sorted(errors.items())]
    if disorder:
        parts.append(f"{disorder} replies out of order")
    return "heartbeats answered with " + ", ".join(parts)


def _method() -> str:
    """The module doc's paragraphs after the first, one line each."""
    paragraphs = (__doc__ or "").strip().split("\n\n")[1:]
    return "\n\n".join(p.replace("\n", " ") for p in paragraphs)


def run(opts: BenchOptions) -> Figure:
    groups = 10 if opts.smoke else 100
    window = 1.5 if opts.smoke else 10.0
    warmup = 0.3 if opts.smoke else 1.0
    rounds = 1 if opts.smoke else 3
    members = groups * MEMBERS_PER_GROUP
    node_w: list[Window] = []
    echo_w: list[Window] = []
    with node(
        opts,
        "heartbeats",
        COORD_TOPICS=f"{TOPIC}:{MEMBERS_PER_GROUP}",
        COORD_INITIAL_REBALANCE_DELAY_MS="200",
    ) as n:
        assert n.proc is not None
        frames, reply_size = run_async(form_groups(n.kafka_port, groups))
        frames_file = opts.workdir / "heartbeat-frames.json"
        frames_file.write_text(json.dumps([[f.hex() for f in conn] for conn in frames]))
        with echo_server(reply_size) as (echo_port, echo_pid):
            for r in range(rounds):
                order = [
                    ("node", n.kafka_port, n.proc.pid, n.admin_url),
                    ("echo", echo_port, echo_pid, None),
                ]
                for what, port, pid, admin in order if r % 2 == 0 else order[::-1]:
                    w = measure(port, pid, frames_file, groups, window, warmup, admin)
                    (node_w if what == "node" else echo_w).append(w)
    ratios = [a.rate / b.rate for a, b in zip(node_w, echo_w, strict=True)]
    ratio = median(ratios)
    errors: Counter[int] = Counter()
    for w in node_w + echo_w:
        errors.update(w.errors)
    disorder = sum(w.out_of_order for w in node_w + echo_w)
    node_rate, echo_rate = median([w.rate for w in node_w]), median([w.rate for w in echo_w])
    verdict = (
        f"{fmt_pct(ratio)} of the echo floor ({fmt_rate(node_rate)} vs {fmt_rate(echo_rate)} "
        f"heartbeats/s); goal ≥ {fmt_pct(GOAL)}: {'met' if ratio >= GOAL else 'not met'}"
    )
    if errors or disorder:
        verdict = f"FAILED: {_errors_text(errors, disorder)}; {verdict}"
    columns = [
        "server",
        "heartbeats/s",
        "vs echo",
        "p50",
        "p99",
        "server CPU",
        "load generators",
        "machine busy (cores)",
        "errors",
    ]
    rows = [
        _row("coordinator node (SQLite)", node_w, fmt_pct(ratio)),
        _row("echo floor (uvloop Protocol)", echo_w, "100%"),
    ]
    notes = [
        f"{members} static members in {groups} Stable groups, {MEMBERS_PER_GROUP} per "
        f"connection, {groups} connections over {len(node_w[0].loadgen_cpu)} load-generator "
        f"processes; Heartbeat v{HB_VERSION} requests of {len(frames[0][0]) - 4}-"
        f"{max(len(f) for c in frames for f in c) - 4} bytes, replies of {reply_size} bytes "
        f"(after the 4-byte size); {members} heartbeats always in flight.",
        f"{rounds} round(s) of {window:g} s windows after {warmup:g} s warm-up, node and echo "
        "alternating; medians shown. CPU is in cores (100% = one core) over the window; the "
        "node and the echo server are single event loops, so ~100% means they are the "
        "bottleneck.",
    ]
    if rounds > 1:
        notes.append(
            "per round, node / echo heartbeats/s: "
            + ", ".join(
                f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} ({fmt_pct(x)})"
                for a, b, x in zip(node_w, echo_w, ratios, strict=True)
            )
        )
    margins = [w.lease_margin for w in node_w if w.lease_margin is not None]
    if margins:
        notes.append(
            f"smallest lease margin the node had left during its windows: {min(margins):.0f} ms "
            "(default COORD_LEASE_TTL_MS 5000, renewed every TTL/4; below the 1000 ms safety "
            "margin, TTL/5, it answers NOT_COORDINATOR)"
        )
    for i, w in enumerate(node_w + echo_w):
        if w.errors or w.out_of_order:
            what = "node" if i < len(node_w) else "echo"
            notes.append(f"{what} round {i % len(node_w) + 1}: {_errors_text(w.errors, 0)}")
    late = max(w.late for w in node_w + echo_w)
    if late > warmup:  # it missed part of the counted window
        notes.append(f"a load generator was {late:.2f} s late at the start barrier")
    return Figure(
        key="heartbeats",
        title="1. Heartbeats/s, 1000 members over 100 connections"
        if not opts.smoke
        else f"1. Heartbeats/s, {members} members over {groups} connections (smoke)",
        goal="≥ 40% of an asyncio/uvloop echo server's rate with the same frame sizes, "
        "connections, in-flight count and event loop",
        columns=columns,
        rows=rows,
        verdict=verdict,
        method=_method(),
        notes=notes,
    )
