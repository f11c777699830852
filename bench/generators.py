"""The closed-loop loads that several figures drive, run in load-generator processes.

Heartbeats: the members of a group share one connection and resend their pre-encoded Heartbeat
frames as soon as the replies come back (figures 1 and 10, and 8 over SASL_SSL). Commits: group
members each commit their own partition with their generation, the next offset as soon as the
last is acknowledged, and read their offsets back at the end (figure 3, figure 8, figure 10).
Latencies are kept in log-scale histograms, small enough to ship back as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
import time
from collections import Counter, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.probes import process_cpu
from tests.support.consumer_bytes import assignment, subscription

_SIZE = struct.Struct(">i")
_ERR = struct.Struct(">h")


# ==== heartbeats ================================================================================

# Heartbeat v4 reply after the size: correlation id (4), header tags (1), throttle (4), error (2)
HB_ERROR_AT = 9
BUCKETS_PER_E = 50.0  # latency histogram: log-scale buckets of 2% (small to ship as JSON)


class HeartbeatStats:
    def __init__(self, t_begin: float, t_end: float) -> None:
        self.t_begin = t_begin  # perf_counter() bounds of the counted window
        self.t_end = t_end
        self.ok = 0
        self.errors: Counter[int] = Counter()
        self.out_of_order = 0
        self.latency: Counter[int] = Counter()  # log bucket -> replies


class HeartbeatLoad(asyncio.Protocol):
    """One connection's members, each in a closed loop; replies come back in request order,
    so a FIFO of (member, send time) pairs each reply with its request."""

    def __init__(self, frames: list[bytes], stats: HeartbeatStats) -> None:
        self.frames = frames
        self.stats = stats
        self.sent: deque[tuple[int, float]] = deque()
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.in_flight = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def start(self) -> None:
        now = time.perf_counter()
        self.sent.extend((m, now) for m in range(len(self.frames)))
        self.in_flight = len(self.frames)
        assert self.transport is not None
        self.transport.write(b"".join(self.frames))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()  # one clock read per read: these replies arrived together
        if self.buf:
            data = self.buf + data
        st = self.stats
        counted = st.t_begin <= now < st.t_end
        resend = now < st.t_end
        out: list[bytes] = []
        pos, n = 0, len(data)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            end = pos + 4 + size
            if end > n:
                break
            member, t0 = self.sent.popleft()
            (corr,) = _SIZE.unpack_from(data, pos + 4)
            (code,) = _ERR.unpack_from(data, pos + 4 + HB_ERROR_AT)
            pos = end
            if corr != member:
                st.out_of_order += 1
            elif code:
                st.errors[code] += 1  # warm-up and drain included: any error fails the figure
            elif counted:
                st.ok += 1
                st.latency[int(math.log(max(now - t0, 1e-7)) * BUCKETS_PER_E)] += 1
            if resend:
                out.append(self.frames[member])
                self.sent.append((member, now))
            else:
                self.in_flight -= 1
        self.buf = data[pos:]
        if out:
            assert self.transport is not None
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if self.in_flight == 0 and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))


def heartbeat_percentile(hist: Counter[int], q: float) -> float:
    """Seconds at percentile `q` of a histogram of BUCKETS_PER_E buckets per e."""
    total = sum(hist.values())
    rank = max(1, round(q / 100 * total + 0.5))
    seen = 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            return math.exp((bucket + 0.5) / BUCKETS_PER_E)
    return float("nan")


# ==== commits ===================================================================================

COMMIT_TOPIC = "bench-commits"
COMMIT_MEMBERS = 10  # members (= committed partitions) per group; one connection per group
HOT = 1 << 30  # correlation ids of hot-loop commits: HOT + member index on the connection
SENTINEL = 0x0123456789ABCDEF  # placeholder offset located in the encoded frame
_OFFSET = struct.Struct(">q")


class CommitStats:
    """Shared by every connection of a worker: window bounds (perf_counter) and counters."""

    def __init__(self) -> None:
        self.running = False
        self.w0 = float("inf")
        self.w1 = float("inf")
        self.ok = 0
        self.errors: dict[int, int] = {}
        self.lat: list[float] = []
        self.sent = 0
        self.inflight = 0


class CommitMember:
    __slots__ = ("acked", "frame", "group", "member_id", "offset", "partition", "pos", "sent")

    def __init__(self, group: str, member_id: str, partition: int) -> None:
        self.group = group
        self.member_id = member_id
        self.partition = partition
        self.frame = bytearray()
        self.pos = 0
        self.offset = 0  # offset of the commit in flight (or last sent)
        self.acked = -1  # last offset acknowledged with error 0
        self.sent = 0.0


def commit_client_class() -> Any:
    from tests.support.kafka_client import KafkaTestClient

    class CommitClient(KafkaTestClient):
        """KafkaTestClient whose hot-loop replies bypass futures and kio decoding: the reply
        handler patches and writes the member's next commit right away (closed loop)."""

        members: list[CommitMember]
        stats: CommitStats

        def _on_frame(self, frame: bytes) -> None:
            (corr,) = _SIZE.unpack_from(frame, 0)
            st = self.stats
            if corr < HOT or (not st.running and not st.inflight):
                super()._on_frame(frame)
                return
            now = time.perf_counter()
            m = self.members[corr - HOT]
            # v8 reply, one topic, one partition: error_code, then 3 empty tagged-field sets
            (err,) = _ERR.unpack_from(frame, len(frame) - 5)
            if err == 0:
                m.acked = m.offset
            if st.w0 <= now < st.w1:
                if err == 0:
                    st.ok += 1
                    st.lat.append(now - m.sent)
                else:
                    st.errors[err] = st.errors.get(err, 0) + 1
            if st.running:
                m.offset += 1
                _OFFSET.pack_into(m.frame, m.pos, m.offset)
                m.sent = now
                st.sent += 1
                self._transport.write(bytes(m.frame))  # type: ignore[union-attr]
            else:
                st.inflight -= 1

        def fire(self, m: CommitMember) -> None:
            m.offset += 1
            _OFFSET.pack_into(m.frame, m.pos, m.offset)
            m.sent = time.perf_counter()
            self.stats.sent += 1
            self._transport.write(bytes(m.frame))  # type: ignore[union-attr]

    return CommitClient


async def _join(client: Any, group: str, n: int) -> tuple[int, list[CommitMember]]:
    """n members join `group` (KIP-394 member-id round trip), the leader assigns one
    partition each, everyone syncs. Returns the generation and the members."""
    sub = subscription([COMMIT_TOPIC])

    def join(member_id: str) -> Any:
        return client.send(
            client.join_group_request(
                group,
                member_id,
                protocols=[("range", sub)],
                session_timeout_ms=30_000,
                rebalance_timeout_ms=60_000,
            )
        )

    first = await asyncio.gather(*(join("") for _ in range(n)))
    ids = [r.member_id for r in first]
    joined = await asyncio.gather(*(join(i) for i in ids))
    gens = {r.generation_id for r in joined}
    if any(r.error_code != 0 for r in joined) or len(gens) != 1:
        got = [(r.error_code, r.generation_id) for r in joined]
        raise RuntimeError(f"{group}: join failed (error, generation): {got}")
    gen = gens.pop()
    leader = joined[0].leader
    order = sorted(ids)
    plan = {mid: order.index(mid) for mid in ids}
    assignments = {m: assignment({COMMIT_TOPIC: [p]}) for m, p in plan.items()}
    syncs = await asyncio.gather(
        *(
            client.send(
                client.sync_group_request(
                    group,
                    gen,
                    mid,
                    assignments=assignments if mid == leader else None,
                )
            )
            for mid in ids
        )
    )
    if any(s.error_code != 0 for s in syncs):
        raise RuntimeError(f"{group}: sync failed {[s.error_code for s in syncs]}")
    return gen, [CommitMember(group, mid, plan[mid]) for mid in ids]


def _prepare_frames(client: Any, gen: int, members: Sequence[CommitMember]) -> None:
    """kio-encode each member's OffsetCommit v8 once; remember where the offset sits."""
    for idx, m in enumerate(members):
        req = client.build_request(
            8, 8, group_id=m.group, generation_id_or_member_epoch=gen, member_id=m.member_id,
            group_instance_id=None, retention_time=-1,
            topics=[{"name": COMMIT_TOPIC, "partitions": [{
                "partition_index": m.partition, "committed_offset": SENTINEL,
                "committed_leader_epoch": -1, "committed_metadata": "",
            }]}],
        )  # fmt: skip
        frame = bytearray(client.encode(req, HOT + idx))
        sentinel = _OFFSET.pack(SENTINEL)
        m.pos = frame.index(sentinel)
        if frame.find(sentinel, m.pos + 1) != -1:
            raise RuntimeError("offset sentinel found twice in the frame")
        m.frame = frame
        m.offset = -1


async def _first_commit(client: Any, members: Sequence[CommitMember]) -> None:
    """Commit offset 0 for every member, decoding the replies with kio to check that the
    hand-parsed error position of the hot loop reads the same code."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(8, 8)
    futs = []
    for idx, m in enumerate(members):
        m.offset = 0
        _OFFSET.pack_into(m.frame, m.pos, 0)
        futs.append(client.expect(HOT + idx, None))
        await client.send_raw(bytes(m.frame))
    for idx, (m, raw) in enumerate(zip(members, await asyncio.gather(*futs), strict=True)):
        full = _SIZE.pack(HOT + idx) + raw
        _, off = entity_reader(cls.__header_schema__)(full, 0)
        body: Any = entity_reader(cls)(full, off)[0]
        code = body.topics[0].partitions[0].error_code
        (fast,) = _ERR.unpack_from(full, len(full) - 5)
        if code != fast or code != 0:
            raise RuntimeError(f"{m.group}/{m.partition}: first commit error {code} (fast {fast})")
        m.acked = 0


def _commit_bucket(seconds: float) -> int:
    """Latency histogram bucket: 1% wide (log scale), so percentiles are within 1%."""
    return int(math.log(max(seconds, 1e-6)) * 100)


def _commit_unbucket(b: int) -> float:
    """Milliseconds at the middle of bucket b."""
    return math.exp((b + 0.5) / 100) * 1000


def commit_percentile(hist: dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if not total:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return _commit_unbucket(b)
    return _commit_unbucket(max(hist))


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = v[3] + v[4]
    return float(sum(v) - idle), float(sum(v))


async def _ready_barrier(ready_dir: str, index: int, n: int, slack: float) -> float:
    """File barrier: each worker writes the wall time its setup ended; all start `slack` after
    the last one (a fixed start time would either waste seconds or catch a slow setup)."""
    d = Path(ready_dir)
    tmp = d / f".{index}"
    tmp.write_text(repr(time.time()))
    tmp.rename(d / str(index))
    deadline = time.monotonic() + 120
    while True:
        got = [p for p in d.iterdir() if not p.name.startswith(".")]
        if len(got) >= n:
            return max(float(p.read_text()) for p in got) + slack
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(got)}/{n} workers got ready")
        await asyncio.sleep(0.02)


async def run_committers(args: dict[str, Any], cls: Any) -> dict[str, Any]:
    """One load-generator process: its groups (one connection each, clients of `cls`, a
    `commit_client_class()` or a subclass of it) join, then every member runs its closed
    commit loop; counts the window, drains, verifies with OffsetFetch."""
    stats = CommitStats()
    loop = asyncio.get_running_loop()
    clients: list[Any] = []
    groups: list[tuple[Any, int, list[CommitMember]]] = []

    async def setup(group: str) -> None:
        client = await cls.connect("127.0.0.1", args["port"], client_id=f"commits-{group}")
        client.stats = stats
        clients.append(client)
        gen, members = await _join(client, group, COMMIT_MEMBERS)
        client.members = members
        _prepare_frames(client, gen, members)
        await _first_commit(client, members)
        groups.append((client, gen, members))

    await asyncio.gather(*(setup(g) for g in args["groups"]))
    start_wall = await _ready_barrier(args["ready_dir"], args["index"], args["workers"], 0.3)
    # wall clock -> perf_counter, so the hot path compares monotonic floats only
    offset = time.perf_counter() - time.time()
    start = start_wall + offset
    stats.w0 = start + args["warmup"]
    stats.w1 = stats.w0 + args["window"]
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    stats.running = True
    for client, _, members in groups:
        for m in members:
            client.fire(m)

    await asyncio.sleep(max(0.0, stats.w0 - time.perf_counter()))
    cpu0, node0, mach0 = time.process_time(), 0.0, (0.0, 0.0)
    if args.get("node_pid"):
        node0, mach0 = process_cpu(args["node_pid"]), _machine_cpu()
    t0 = time.perf_counter()
    await asyncio.sleep(max(0.0, stats.w1 - time.perf_counter()))
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    node1, mach1 = 0.0, (0.0, 0.0)
    if args.get("node_pid"):
        node1, mach1 = process_cpu(args["node_pid"]), _machine_cpu()
    # stop: every member has exactly one commit in flight; wait for all of them
    stats.inflight = sum(len(ms) for _, _, ms in groups)
    stats.running = False
    deadline = loop.time() + 30
    while stats.inflight and loop.time() < deadline:
        await asyncio.sleep(0.01)
    if stats.inflight:
        raise RuntimeError(f"{stats.inflight} commits unanswered 30 s after the window")

    # read back: the committed offset of every member's partition is its last acked offset
    bad: list[str] = []
    for client, _, members in groups:
        resp = await client.offset_fetch(
            members[0].group, [(COMMIT_TOPIC, m.partition) for m in members]
        )
        got = {p.partition_index: p.committed_offset for p in resp.groups[0].topics[0].partitions}
        bad += [
            f"{m.group}/{m.partition}: fetched {got.get(m.partition)} acked {m.acked}"
            for m in members
            if got.get(m.partition) != m.acked
        ]
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()
    # The result must stay well under 64 KiB: with PYTHONUNBUFFERED=1 in the environment, a
    # worker's final print after uvloop.run() is cut at the pipe size when run_workers has
    # not started reading that pipe yet (seen: JSON truncated at 65536 bytes, exit code 0).
    # Hence a latency histogram rather than samples.
    hist: dict[int, int] = {}
    for x in stats.lat:
        b = _commit_bucket(x)
        hist[b] = hist.get(b, 0) + 1
    return {
        "ok": stats.ok,
        "errors": {str(k): v for k, v in stats.errors.items()},
        "lat_hist": [[b, n] for b, n in sorted(hist.items())],
        "seconds": t1 - t0,
        "cpu": cpu1 - cpu0,
        "node_cpu": node1 - node0,
        "machine": [mach1[0] - mach0[0], mach1[1] - mach0[1]],
        "verified": sum(len(ms) for _, _, ms in groups) - len(bad),
        "bad": bad[:5],
        "acked": {
            ms[0].group: [m.acked for m in sorted(ms, key=lambda m: m.partition)]
            for _, _, ms in groups
        },
    }
