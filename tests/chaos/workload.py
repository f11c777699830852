"""Joins, syncs, heartbeats and offset commits in many small groups, driven by the project's
protocol client (tests/support/kafka_client.py) on its own event loop in a background thread.

Each group has one or two dynamic members. A member finds its coordinator through any node,
joins (MEMBER_ID_REQUIRED first), the leader assigns the topic's partitions by range in the
consumer protocol's wire format, and then it commits, with its generation and member id, a
fresh offset from one global increasing counter for its partitions, heartbeats, and now and
then rejoins (churn). Coordinator errors and dead connections lead it to rediscover the
coordinator, like a real client (clients.md §1.3).

Observations: every acknowledged commit (group, topic, partition, offset), every successful
SyncGroup (group, generation, member, partitions), error counts. The fault injector can arm a
hook that fires the moment a chosen group sends a JoinGroup, SyncGroup or OffsetCommit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.consumer_bytes import assignment, range_assign, subscription
from tests.support.kafka_client import ConnectionClosed, KafkaTestClient
from tests.support.tasks import cancel_and_wait

# error codes (app.group.messages.Error)
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
REJOIN = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 8_000

# (JoinGroup, SyncGroup, Heartbeat, OffsetCommit) versions; groups cycle through these
VERSION_SETS = ((9, 5, 4, 8), (5, 3, 3, 7), (7, 4, 4, 8))


def err(resp: Any) -> int:
    return int(resp.error_code)


class Retry(Exception):
    """Drop the connection and rediscover the coordinator."""


@dataclass(frozen=True)
class Ack:
    group: str
    topic: str
    partition: int
    offset: int
    generation: int
    member_id: str
    t: float


@dataclass(frozen=True)
class SyncObservation:
    group: str
    generation: int
    member_id: str
    partitions: tuple[int, ...]
    t: float


@dataclass
class Member:
    group: str
    name: str
    versions: tuple[int, int, int, int]
    conn: KafkaTestClient | None = None
    coordinator: tuple[str, int] | None = None
    member_id: str = ""
    generation: int = -1
    partitions: tuple[int, ...] = ()
    need_join: bool = True
    last_heartbeat: float = 0.0


@dataclass
class Workload:
    addresses: list[tuple[str, int]]
    groups: list[str]
    topic: str
    partitions: int
    seed: int
    two_member_every: int = 2  # every n-th group has two members
    acks: list[Ack] = field(default_factory=list)
    syncs: list[SyncObservation] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    crashes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.lock = threading.Lock()
        self._offsets = itertools.count(1)
        self._hooks: dict[tuple[str, str], threading.Event] = {}
        self._rejoin: set[str] = set()
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self.members: list[Member] = []
        for i, g in enumerate(self.groups):
            n = 2 if i % self.two_member_every == 0 else 1
            for j in range(n):
                self.members.append(Member(g, f"{g}-m{j}", VERSION_SETS[i % len(VERSION_SETS)]))

    # --- control from the test thread ------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="workload", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 20.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.crashes.append("workload thread did not stop in time")

    def arm(self, group: str, phase: str) -> threading.Event:
        """An event set when `group` next sends a request of `phase` (join, sync, commit); for
        join and sync the group's members are asked to rejoin so that one comes soon."""
        ev = threading.Event()
        with self.lock:
            self._hooks[(group, phase)] = ev
            if phase in ("join", "sync"):
                self._rejoin.add(group)
        return ev

    def disarm(self) -> None:
        with self.lock:
            self._hooks.clear()

    def snapshot(self) -> tuple[list[Ack], list[SyncObservation]]:
        with self.lock:
            return list(self.acks), list(self.syncs)

    # --- the event loop ----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # surfaced by the test
            self.crashes.append(f"workload crashed: {e!r}")

    async def _run(self) -> None:
        tasks = [asyncio.create_task(self._member_loop(m), name=m.name) for m in self.members]
        while not self._stop.is_set():
            await asyncio.sleep(0.05)
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    self.crashes.append(f"{t.get_name()}: {t.exception()!r}")
                    tasks.remove(t)
                    break
        await asyncio.gather(*(cancel_and_wait(t) for t in tasks))
        for m in self.members:
            await self._drop(m)

    def _fire(self, group: str, phase: str) -> None:
        with self.lock:
            ev = self._hooks.pop((group, phase), None)
        if ev is not None:
            ev.set()

    def _count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def _error(self, api: str, code: int) -> None:
        with self.lock:
            self.errors[f"{api}:{code}"] += 1

    async def _member_loop(self, m: Member) -> None:
        rng = random.Random(f"{self.seed}-{m.name}")
        await asyncio.sleep(rng.uniform(0, 1.0))
        while not self._stop.is_set():
            try:
                if m.conn is None or m.conn.is_closed:
                    await self._discover(m, rng)
                with self.lock:
                    if m.group in self._rejoin:
                        self._rejoin.discard(m.group)
                        m.need_join = True
                if m.need_join:
                    await self._join_and_sync(m)
                    continue
                await self._commit(m)
                if time.monotonic() - m.last_heartbeat > 1.0:
                    await self._heartbeat(m)
                if rng.random() < 1 / 60:
                    self._count("churn")
                    m.need_join = True  # rejoin with our member id: a rebalance
                await asyncio.sleep(rng.uniform(0.3, 0.7))
            except (TimeoutError, Retry, ConnectionClosed, OSError):
                await self._drop(m)
                await asyncio.sleep(rng.uniform(0.1, 0.3))

    async def _drop(self, m: Member) -> None:
        conn, m.conn, m.coordinator = m.conn, None, None
        if conn is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(conn.close(), 1)

    async def _discover(self, m: Member, rng: random.Random) -> None:
        addrs = list(self.addresses)
        rng.shuffle(addrs)
        for host, port in addrs:
            try:
                c = await asyncio.wait_for(
                    KafkaTestClient.connect(host, port, client_id=m.name), 1.0
                )
            except (TimeoutError, OSError):
                continue
            try:
                r = await asyncio.wait_for(c.find_coordinator(m.group, version=3), 2.0)
            except (TimeoutError, OSError, ConnectionClosed):
                continue
            finally:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(c.close(), 1)
            self._count("find_coordinator")
            if err(r) != NONE:
                self._error("FindCoordinator", err(r))
                continue
            m.conn = await asyncio.wait_for(
                KafkaTestClient.connect(r.host, r.port, client_id=m.name), 1.0
            )
            m.coordinator = (r.host, r.port)
            return
        raise Retry("no node answered FindCoordinator")

    async def _request(self, m: Member, req: Any, phase: str | None, timeout: float) -> Any:
        assert m.conn is not None
        fut = m.conn.send(req)
        if phase is not None:
            self._fire(m.group, phase)
        return await asyncio.wait_for(fut, timeout)

    async def _join_and_sync(self, m: Member) -> None:
        jv, sv, _hv, _cv = m.versions
        assert m.conn is not None
        sub = subscription([self.topic])
        req = m.conn.join_group_request(
            m.group,
            m.member_id,
            protocols=[("range", sub)],
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            version=jv,
        )
        self._count("join")
        r = await self._request(m, req, "join", REBALANCE_TIMEOUT_MS / 1000 + 7)
        code = err(r)
        if code == MEMBER_ID_REQUIRED:
            m.member_id = r.member_id
            return
        if code != NONE:
            self._error("JoinGroup", code)
            return await self._on_error(m, code)
        m.member_id, m.generation = r.member_id, r.generation_id
        assignments: dict[str, bytes] = {}
        if r.leader == m.member_id:
            ids = [x.member_id for x in r.members]
            for mid, tps in range_assign(ids, {self.topic: self.partitions}).items():
                assignments[mid] = assignment({self.topic: tps.get(self.topic, [])})
        sreq = m.conn.sync_group_request(
            m.group, m.generation, m.member_id, assignments=assignments, version=sv
        )
        self._count("sync")
        s = await self._request(m, sreq, "sync", REBALANCE_TIMEOUT_MS / 1000 + 7)
        code = err(s)
        if code != NONE:
            self._error("SyncGroup", code)
            return await self._on_error(m, code)
        m.partitions = decode_partitions(s.assignment, self.topic)
        m.need_join = False
        m.last_heartbeat = time.monotonic()
        with self.lock:
            self.syncs.append(
                SyncObservation(m.group, m.generation, m.member_id, m.partitions, time.time())
            )

    async def _commit(self, m: Member) -> None:
        if not m.partitions:
            return
        _jv, _sv, _hv, cv = m.versions
        offset = next(self._offsets)
        req = KafkaTestClient.build_request(
            8,
            cv,
            group_id=m.group,
            generation_id_or_member_epoch=m.generation,
            member_id=m.member_id,
            group_instance_id=None,
            retention_time=-1,
            topics=[
                {
                    "name": self.topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for p in m.partitions
                    ],
                }
            ],
        )
        self._count("commit")
        r = await self._request(m, req, "commit", 6.0)
        codes = {int(p.error_code) for t in r.topics for p in t.partitions}
        now = time.time()
        with self.lock:
            for t in r.topics:
                for p in t.partitions:
                    if int(p.error_code) == NONE:
                        self.acks.append(
                            Ack(
                                m.group,
                                t.name,
                                int(p.partition_index),
                                offset,
                                m.generation,
                                m.member_id,
                                now,
                            )
                        )
        bad = codes - {NONE}
        if bad:
            code = min(bad)
            self._error("OffsetCommit", code)
            await self._on_error(m, code)

    async def _heartbeat(self, m: Member) -> None:
        _jv, _sv, hv, _cv = m.versions
        assert m.conn is not None
        req = m.conn.heartbeat_request(m.group, m.generation, m.member_id, version=hv)
        self._count("heartbeat")
        r = await self._request(m, req, None, 6.0)
        code = err(r)
        m.last_heartbeat = time.monotonic()
        if code != NONE:
            self._error("Heartbeat", code)
            await self._on_error(m, code)

    async def _on_error(self, m: Member, code: int) -> None:
        if code in MOVED:
            raise Retry(f"coordinator error {code}")
        if code == UNKNOWN_MEMBER_ID:
            m.member_id = ""
        if code in REJOIN:
            m.need_join = True
            return
        await asyncio.sleep(0.2)  # COORDINATOR_LOAD_IN_PROGRESS and the unexpected: retry


def decode_partitions(assignment: bytes, topic: str) -> tuple[int, ...]:
    from app.group.consumer_protocol import decode_assignment

    if not assignment:
        return ()
    out: list[int] = []
    for t, ps in decode_assignment(assignment).partitions:
        if t == topic:
            out.extend(ps)
    return tuple(sorted(out))


async def fetch_committed(
    addresses: list[tuple[str, int]], group: str, topic: str, partitions: int, tries: int = 40
) -> dict[int, int]:
    """OffsetFetch through the cluster (FindCoordinator, then the owner); retried until served."""
    last_error = "no attempt"
    for _ in range(tries):
        for host, port in addresses:
            try:
                c = await asyncio.wait_for(KafkaTestClient.connect(host, port), 1.0)
            except (TimeoutError, OSError):
                continue
            try:
                fc = await asyncio.wait_for(c.find_coordinator(group, version=3), 2.0)
                if err(fc) != NONE:
                    last_error = f"FindCoordinator {err(fc)}"
                    continue
                o = await asyncio.wait_for(KafkaTestClient.connect(fc.host, fc.port), 1.0)
                try:
                    r = await asyncio.wait_for(
                        o.offset_fetch(group, [(topic, p) for p in range(partitions)], version=8),
                        3.0,
                    )
                finally:
                    await o.close()
                (g,) = r.groups
                if int(g.error_code) != NONE:
                    last_error = f"OffsetFetch group error {int(g.error_code)}"
                    continue
                out: dict[int, int] = {}
                bad = []
                for t in g.topics:
                    for p in t.partitions:
                        if int(p.error_code) != NONE:
                            bad.append(int(p.error_code))
                        elif int(p.committed_offset) >= 0:
                            out[int(p.partition_index)] = int(p.committed_offset)
                if bad:
                    last_error = f"OffsetFetch partition errors {bad}"
                    continue
                return out
            except (TimeoutError, OSError, ConnectionClosed) as e:
                last_error = repr(e)
            finally:
                with contextlib.suppress(BaseException):
                    await c.close()
        await asyncio.sleep(0.25)
    raise AssertionError(f"OffsetFetch of {group} never served: {last_error}")


async def simple_commit(
    addresses: Sequence[tuple[str, int]], group: str, topic: str, offset: int, timeout: float
) -> int:
    """One standalone ("simple group", generation -1) OffsetCommit of partition 0 through the
    cluster: FindCoordinator at each node in turn, then the commit at the owner. The error code
    (0 = acknowledged), or -2 when nobody answered in time."""
    for host, port in addresses:
        try:
            c = await asyncio.wait_for(KafkaTestClient.connect(host, port), 1.0)
        except (TimeoutError, OSError):
            continue
        try:
            fc = await asyncio.wait_for(c.find_coordinator(group, version=3), timeout)
            if err(fc) != NONE:
                continue
            o = await asyncio.wait_for(KafkaTestClient.connect(fc.host, fc.port), 1.0)
            try:
                r = await asyncio.wait_for(
                    o.offset_commit(group, {(topic, 0): offset}, version=8), timeout
                )
            finally:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(o.close(), 1)
            return max((int(p.error_code) for t in r.topics for p in t.partitions), key=abs)
        except (TimeoutError, OSError, ConnectionClosed):
            continue
        finally:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(c.close(), 1)
    return -2


async def probe_service(
    addresses: Sequence[tuple[str, int]],
    groups: dict[int, str],
    topic: str,
    offsets: Any,
    deadline_s: float,
    acks: list[tuple[str, str, int, int]],
) -> dict[int, float]:
    """Until every log partition in `groups` (partition -> a group placed there) acknowledges a
    standalone commit, or the deadline: partition -> seconds until it did. Acknowledged commits
    are appended to `acks` (they are checked like any other)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    served: dict[int, float] = {}

    async def one(p: int) -> None:
        while loop.time() - t0 < deadline_s:
            offset = next(offsets)
            code = await simple_commit(addresses, groups[p], topic, offset, 2.0)
            if code == NONE:
                acks.append((groups[p], topic, 0, offset))
                served[p] = loop.time() - t0
                return
            await asyncio.sleep(0.1)

    await asyncio.gather(*(one(p) for p in groups))
    return served
