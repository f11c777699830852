"""Simulated consumers of the classic group protocol, on one log partition's coordinator.

Consumers (two-step dynamic joins, static members, leader-side range assignment sorted by
group.instance.id, heartbeats, periodic commits) talk to one `GroupCoordinator` on a fake
clock, exactly as tests/unit/context.py does, and every record the coordinator asks to append
is appended, in log order, to the partition's rows. pipeline/generate.py adds the operators'
weather and writes the export.
"""

from __future__ import annotations

import heapq
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.group.config import CoreConfig
from app.group.consumer_protocol import decode_assignment, decode_subscription
from app.group.coordinator import GroupCoordinator
from app.group.messages import (
    Error,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveMember,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.records import Record
from app.group.results import Result

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SESSION_MS = 10_000
REBALANCE_MS = 15_000
HEARTBEAT_MS = 3_000
TOPIC_PARTITION = -1  # the topic registry's log partition


# ==== consumer protocol bytes ==================================================================


def _str16(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: topics, no user data."""
    return (
        struct.pack(">hi", 0, len(topics))
        + b"".join(_str16(t) for t in topics)
        + struct.pack(">i", -1)
    )


def encode_assignment(tps: list[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in sorted(by_topic.items()):
        out.append(
            _str16(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
        )
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def range_assign(
    members: list[tuple[str, str | None, bytes]], topics: dict[str, int]
) -> dict[str, bytes]:
    """Kafka's RangeAssignor: per topic, consecutive ranges to members sorted by
    group.instance.id (static) or member id, so a restarted static member keeps its range."""
    subs = {mid: set(decode_subscription(meta).topics) for mid, _, meta in members}
    order = sorted(members, key=lambda m: (m[1] is None, m[1] or m[0]))
    got: dict[str, list[tuple[str, int]]] = {mid: [] for mid, _, _ in members}
    for topic in sorted(topics):
        who = [mid for mid, _, _ in order if topic in subs[mid]]
        if not who:
            continue
        n, k = topics[topic], len(who)
        per, extra = divmod(n, k)
        start = 0
        for i, mid in enumerate(who):
            size = per + (1 if i < extra else 0)
            got[mid].extend((topic, p) for p in range(start, start + size))
            start += size
    return {mid: encode_assignment(tps) for mid, tps in got.items()}


# ==== the simulation ===========================================================================


@dataclass
class Client:
    """One consumer process (a new Client object per process start)."""

    group: GroupSim
    name: str
    instance_id: str | None
    skip_assignment: bool  # JoinGroup v9+ (KIP-814)
    member_id: str = ""
    generation: int = -1
    state: str = "down"  # down | joining | syncing | stable
    assigned: list[tuple[str, int]] = field(default_factory=list)
    alive: bool = True

    def topics(self) -> list[str]:
        return sorted(self.group.topics)


@dataclass
class GroupSim:
    group_id: str
    topics: dict[str, int]
    clients: list[Client] = field(default_factory=list)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    position: dict[tuple[str, int], int] = field(default_factory=dict)
    next_instance: int = 0
    deleted: bool = False


class SimulatedPartition:
    """The groups of one log partition, their consumers and their coordinator, on a fake
    clock."""

    def __init__(
        self,
        partition: int,
        groups: list[GroupSim],
        seed: int,
        budget: int,
        sink: Callable[[list[tuple[Any, ...]]], None],
    ) -> None:
        self.partition = partition
        self.rng = random.Random(seed)
        self.groups = groups
        self.budget = budget
        self.sink = sink
        self.now = START_MS + self.rng.randint(0, 5_000)
        self.config = CoreConfig(initial_rebalance_delay_ms=3_000)
        self._ids = 0
        self.core = self._new_core()
        self.core.on_loaded(self.now)
        self.epoch, self.node_id = 1, 1
        self.offset = 0
        self.appended = 0
        self.latest: dict[bytes, tuple[int, Record]] = {}  # compacted view, for failover loads
        self.buf: list[tuple[Any, ...]] = []
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self.seq = 0
        self.handle = 0
        self.waiting: dict[int, tuple[Client, str]] = {}

    def _new_core(self) -> GroupCoordinator:
        return GroupCoordinator(self.config, self._member_id)

    def _member_id(self, prefix: str) -> str:
        self._ids += 1
        n = self._ids
        return (
            f"{prefix}-{self.partition:04x}{n % 65536:04x}-4{n % 4093:03x}-a{n % 997:03x}-{n:012x}"
        )

    # ---- plumbing ---------------------------------------------------------------------------

    def at(self, delay_ms: int, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (self.now + max(delay_ms, 0), self.seq, fn))

    def _new_handle(self, client: Client, kind: str) -> int:
        self.handle += 1
        self.waiting[self.handle] = (client, kind)
        return self.handle

    def apply(self, result: Result) -> None:
        """Writes become durable at once (in log order), then replies go out."""
        pending = [result]
        replies = []
        while pending:
            r = pending.pop(0)
            replies.extend(r.replies)
            for w in r.writes:
                self._append(w.records)
                pending.append(self.core.on_write_complete(w.continuation, None, self.now))
        for handle, reply in replies:
            waiter = self.waiting.pop(handle, None)
            if waiter is not None:
                client, kind = waiter
                self._on_reply(client, kind, reply)

    def _append(self, records: list[Record]) -> None:
        for rec in records:
            self.buf.append(
                (
                    self.partition,
                    self.offset,
                    int(rec.type),
                    rec.key,
                    rec.value,
                    self.epoch,
                    self.node_id,
                    self.now,
                )
            )
            self.latest[rec.key + bytes([rec.type])] = (self.offset, rec)
            self.offset += 1
        self.appended += len(records)
        if len(self.buf) >= 100_000:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.sink(self.buf)
            self.buf = []

    # ---- clients ------------------------------------------------------------------------------

    def _spawn(
        self, g: GroupSim, instance_id: str | None = None, static: bool | None = None
    ) -> Client:
        if static is None:
            static = self.rng.random() < 0.6
        if static and instance_id is None:
            instance_id = f"{g.group_id}-i{g.next_instance}"
            g.next_instance += 1
        c = Client(
            g,
            f"{g.group_id}-c{len(g.clients)}",
            instance_id,
            skip_assignment=self.rng.random() < 0.7,
        )
        g.clients.append(c)
        return c

    def _start(self, c: Client) -> None:
        c.state = "joining"
        self._join(c)

    def _join(self, c: Client) -> None:
        if not c.alive:
            return
        c.state = "joining"
        req = JoinGroupRequest(
            group_id=c.group.group_id,
            member_id=c.member_id,
            group_instance_id=c.instance_id,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer",
            protocols=(("range", encode_subscription(c.topics())),),
            client_id=c.name,
            client_host="/10.0.0.1",
            require_known_member_id=c.instance_id is None,
            supports_skip_assignment=c.skip_assignment,
        )
        h = self._new_handle(c, "join")
        self.apply(self.core.join_group(h, req, self.now))

    def _sync(self, c: Client, assignments: tuple[tuple[str, bytes], ...]) -> None:
        if not c.alive:
            return
        c.state = "syncing"
        req = SyncGroupRequest(
            c.group.group_id,
            c.generation,
            c.member_id,
            c.instance_id,
            "consumer",
            "range",
            assignments,
        )
        h = self._new_handle(c, "sync")
        self.apply(self.core.sync_group(h, req, self.now))

    def _rejoin_later(self, c: Client, reset_id: bool = False) -> None:
        if reset_id:
            c.member_id = ""
        c.state = "joining"
        self.at(self.rng.randint(50, 500), lambda: self._join(c))

    def _on_reply(self, c: Client, kind: str, reply: Any) -> None:
        if not c.alive:
            return
        latency = self.rng.randint(1, 8)
        if kind == "join":
            assert isinstance(reply, JoinGroupResponse)
            e = reply.error
            if e is Error.MEMBER_ID_REQUIRED:
                c.member_id = reply.member_id
                self.at(latency, lambda: self._join(c))
            elif e is Error.NONE:
                c.member_id, c.generation = reply.member_id, reply.generation_id
                assignments: tuple[tuple[str, bytes], ...] = ()
                if reply.leader == c.member_id and reply.members and not reply.skip_assignment:
                    members = [
                        (m.member_id, m.group_instance_id, m.metadata) for m in reply.members
                    ]
                    assignments = tuple(range_assign(members, c.group.topics).items())
                self.at(latency, lambda: self._sync(c, assignments))
            elif e is Error.REBALANCE_IN_PROGRESS:
                pass  # superseded by a newer JoinGroup of ours
            elif e is Error.FENCED_INSTANCE_ID:
                c.alive = False  # a zombie: a newer process took the instance id
            else:
                self._rejoin_later(c, reset_id=e is Error.UNKNOWN_MEMBER_ID)
        elif kind == "sync":
            assert isinstance(reply, SyncGroupResponse)
            e = reply.error
            if e is Error.NONE:
                c.state = "stable"
                c.assigned = (
                    [(t, p) for t, ps in decode_assignment(reply.assignment).partitions for p in ps]
                    if reply.assignment
                    else []
                )
                g = c.group
                for tp in c.assigned:
                    g.position[tp] = g.committed.get(tp, 0)
            elif e is Error.FENCED_INSTANCE_ID:
                c.alive = False
            else:
                self._rejoin_later(c, reset_id=e is Error.UNKNOWN_MEMBER_ID)
        elif kind == "commit":
            assert isinstance(reply, OffsetCommitResponse)
            for p in reply.partitions:
                if p.error is Error.ILLEGAL_GENERATION and c.state == "stable":
                    self._rejoin_later(c)
                    break
                if p.error is Error.UNKNOWN_MEMBER_ID and c.state == "stable":
                    self._rejoin_later(c, reset_id=True)
                    break

    def _heartbeat_loop(self, c: Client) -> None:
        if not c.alive:
            return
        self.at(HEARTBEAT_MS + self.rng.randint(-200, 200), lambda: self._heartbeat_loop(c))
        if c.state != "stable":
            return
        resp = self.core.heartbeat(
            HeartbeatRequest(c.group.group_id, c.generation, c.member_id, c.instance_id), self.now
        )
        e = resp.error
        if e is Error.REBALANCE_IN_PROGRESS:
            self._join(c)
        elif e is Error.FENCED_INSTANCE_ID:
            c.alive = False
        elif e in (Error.UNKNOWN_MEMBER_ID, Error.ILLEGAL_GENERATION):
            self._rejoin_later(c, reset_id=e is Error.UNKNOWN_MEMBER_ID)

    def _commit_loop(self, c: Client, interval: int) -> None:
        if not c.alive:
            return
        self.at(interval + self.rng.randint(-300, 300), lambda: self._commit_loop(c, interval))
        if c.state != "stable" or not c.assigned:
            return
        g = c.group
        parts = []
        for tp in c.assigned:
            g.position[tp] = g.position.get(tp, 0) + self.rng.randint(0, 400)
            parts.append(OffsetCommitPartition(tp[0], tp[1], g.position[tp]))
        req = OffsetCommitRequest(
            g.group_id, c.generation, c.member_id, c.instance_id, tuple(parts)
        )
        h = self._new_handle(c, "commit")
        result = self.core.offset_commit(h, req, self.now)
        self.apply(result)
        for p in parts:  # durable now (writes complete at once)
            g.committed[(p.topic, p.partition)] = p.offset

    def _launch(self, c: Client) -> None:
        self._start(c)
        self.at(HEARTBEAT_MS, lambda: self._heartbeat_loop(c))
        self.at(self.rng.randint(2_000, 5_000), lambda: self._commit_loop(c, 5_000))

    def _stop(self, c: Client, leave: bool) -> None:
        """The process stops; dynamic members (and static ones when told) send LeaveGroup."""
        if not c.alive:
            return
        c.alive = False
        if leave and c.member_id:
            h = self._new_handle(c, "leave")
            req = LeaveGroupRequest(
                c.group.group_id, (LeaveMember(c.member_id, c.instance_id, "shutdown"),)
            )
            self.apply(self.core.leave_group(h, req, self.now))

    def _restart(self, old: Client, down_ms: int) -> None:
        """A new process for the same group.instance.id (or a fresh dynamic member)."""
        self._stop(old, leave=old.instance_id is None)
        g = old.group

        def up() -> None:
            c = self._spawn(g, old.instance_id, static=old.instance_id is not None)
            c.skip_assignment = old.skip_assignment
            self._launch(c)

        self.at(down_ms, up)
