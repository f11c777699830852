"""Large, realistic event logs for the audit, driven through the real pure state machine.

Simulated consumers (the classic consumer protocol: two-step dynamic joins, static members,
leader-side range assignment sorted by group.instance.id, heartbeats, periodic commits) talk to
one `GroupCoordinator` per log partition on a fake clock, exactly as tests/unit/context.py does,
and every record the coordinator asks to append is appended. Operators add weather: static
restarts (absorbed without a rebalance, SkipAssignment for v9 leaders), outages longer than the
session timeout, dynamic restarts, scale-ups with and without pre-registration, scale-downs,
forced rebalances, shutdowns with an offset reset, group deletions and node failovers (the
partition is reloaded from its compacted log at a new epoch).

Output is the `coordinator export` format: log.parquet (newest record per key), history.parquet
(superseded records, as compaction would have moved them) and manifest.json.

    python -m pipeline.generate --out /tmp/audit-in --records 1000000 --workers 2
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

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
from app.group.records import Record, TopicValue, topic_record
from app.group.results import Result
from app.runtime.placement import partition_for
from storage.export import HISTORY_SCHEMA, LOG_SCHEMA

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


class PartitionSim:
    """The groups of one log partition and their coordinator, on a fake clock."""

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

    def run(self) -> None:
        for g in self.groups:
            self.at(self.rng.randint(0, 20_000), partial(self._start_group, g))
            self.at(self.rng.randint(60_000, 400_000), partial(self._weather, g))
        self.at(self.rng.randint(1_800_000, 7_200_000), self._failover)
        while self.appended < self.budget and self.events:
            t = self.events[0][0]
            deadline = self.core.next_deadline()
            if deadline is not None and deadline <= t:
                self.now = max(self.now, deadline)
                self.apply(self.core.poll_timers(self.now))
                continue
            _, _, fn = heapq.heappop(self.events)
            self.now = max(self.now, t)
            fn()
        self.flush()

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

    # ---- operators ---------------------------------------------------------------------------

    def _start_group(self, g: GroupSim) -> None:
        for _ in range(self.rng.randint(2, 6)):
            self.at(self.rng.randint(0, 1_500), partial(self._launch, self._spawn(g)))

    def _live(self, g: GroupSim) -> list[Client]:
        return [c for c in g.clients if c.alive]

    def _weather(self, g: GroupSim) -> None:
        self.at(int(self.rng.expovariate(1 / 180_000)) + 20_000, lambda: self._weather(g))
        live = self._live(g)
        if g.deleted:
            g.deleted = False
            self._start_group(g)
            return
        if not live:
            return self._after_shutdown(g)
        static = [c for c in live if c.instance_id is not None]
        dynamic = [c for c in live if c.instance_id is None]
        r = self.rng.random()
        if r < 0.40 and static:  # rolling restart of static members: no rebalance
            for i, c in enumerate(self.rng.sample(static, self.rng.randint(1, len(static)))):
                self.at(i * 4_000, partial(self._restart, c, self.rng.randint(500, 4_000)))
        elif r < 0.47 and static:  # a static member is down longer than its session
            self._restart(self.rng.choice(static), SESSION_MS + self.rng.randint(2_000, 20_000))
        elif r < 0.60 and dynamic:  # dynamic restart: leave + join
            self._restart(self.rng.choice(dynamic), self.rng.randint(500, 3_000))
        elif r < 0.68:  # pre-registered scale-up of static members
            k = self.rng.randint(1, 4)
            ids = [f"{g.group_id}-i{g.next_instance + i}" for i in range(k)]
            g.next_instance += k
            h = self._new_handle(live[0], "admin")
            self.apply(self.core.register_static_members(h, g.group_id, ids, 20_000, self.now))
            late = self.rng.random() < 0.15  # one of them never comes
            for i, inst in enumerate(ids):
                if late and i == len(ids) - 1:
                    continue
                c = self._spawn(g, inst, static=True)
                self.at(5_000 + i * self.rng.randint(300, 3_000), partial(self._launch, c))
        elif r < 0.74:  # scale-up without registration: members trickle in
            for i in range(self.rng.randint(1, 3)):
                c = self._spawn(g)
                self.at(i * self.rng.randint(500, 6_000), partial(self._launch, c))
        elif r < 0.82 and len(live) > 2:  # scale-down
            c = self.rng.choice(live)
            self._stop(c, leave=True)
        elif r < 0.89:
            reason = self.rng.choice(
                [
                    "rolling config change",
                    "rebalance after topic expansion",
                    "operator request",
                    "skewed lag",
                ]
            )
            h = self._new_handle(live[0], "admin")
            self.apply(self.core.force_rebalance(h, g.group_id, reason, self.now))
        elif r < 0.93:  # shutdown: everybody leaves; the weather resets offsets, restarts
            for c in live:
                self._stop(c, leave=True)
        # else: a quiet period

    def _after_shutdown(self, g: GroupSim) -> None:
        group = self.core.groups.get(g.group_id)
        empty = group is not None and not group.members
        if empty and g.committed and self.rng.random() < 0.6:
            # kafka-consumer-groups --reset-offsets: rewind through the admin path
            parts = tuple(
                OffsetCommitPartition(t, p, max(o - self.rng.randint(0, 5_000), 0))
                for (t, p), o in sorted(g.committed.items())
            )
            req = OffsetCommitRequest(g.group_id, -1, "", None, parts)
            h = self._new_handle(Client(g, "admin", None, False), "admin")
            self.apply(self.core.offset_commit(h, req, self.now))
            for p in parts:
                g.committed[(p.topic, p.partition)] = p.offset
        elif empty and self.rng.random() < 0.3:
            h = self._new_handle(Client(g, "admin", None, False), "admin")
            self.apply(self.core.delete_group(h, g.group_id, self.now))
            g.committed.clear()
            g.position.clear()
            g.deleted = True
            return
        self._start_group(g)

    def _failover(self) -> None:
        """Another node takes the partition: it loads the compacted log at a new epoch."""
        self.at(self.rng.randint(1_800_000, 7_200_000), self._failover)
        self.apply(self.core.unload(self.now))
        self.core = self._new_core()
        for _, rec in sorted(self.latest.values(), key=lambda x: x[0]):
            self.core.replay(rec)
        self.epoch += 1
        self.node_id = 1 + (self.node_id % 3)
        self.now += self.rng.randint(1_000, 5_000)  # the takeover is not instant
        self.apply(self.core.on_loaded(self.now))
        self.waiting.clear()  # parked requests were answered NOT_COORDINATOR by unload
        for g in self.groups:
            for c in self._live(g):
                if c.state in ("joining", "syncing"):
                    self._rejoin_later(c)


# ==== workers and output ========================================================================


def _group_names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    kinds = [
        "billing",
        "orders",
        "payments",
        "search-index",
        "fraud",
        "ledger",
        "emails",
        "analytics",
        "inventory",
        "shipping",
        "audit",
        "pricing",
    ]
    return [f"{rng.choice(kinds)}-{i:05d}" for i in range(n)]


def _topics_for(name: str, seed: int) -> dict[str, int]:
    rng = random.Random(f"{seed}:{name}")
    base = name.rsplit("-", 1)[0]
    topics = {f"{base}.events": rng.choice([6, 12, 16, 24, 32, 48])}
    if rng.random() < 0.3:
        topics[f"{base}.retries"] = rng.choice([1, 2, 3])
    return topics


def _simulate(args: tuple[list[int], int, int, int, int, str]) -> tuple[str, str, int, int]:
    """Worker: simulate the given log partitions; write their log/history parts."""
    partitions, n_groups, log_partitions, records, seed, tmp = args
    names = _group_names(n_groups, seed)
    by_part: dict[int, list[str]] = {}
    for name in names:
        by_part.setdefault(partition_for(name, log_partitions), []).append(name)
    total_groups = len(names)
    log_path = Path(tmp) / f"log-{partitions[0]:05d}.parquet"
    hist_path = Path(tmp) / f"history-{partitions[0]:05d}.parquet"
    n_log = n_hist = 0
    with (
        pq.ParquetWriter(log_path, LOG_SCHEMA, compression="zstd") as lw,
        pq.ParquetWriter(hist_path, HISTORY_SCHEMA, compression="zstd") as hw,
    ):
        for part in partitions:
            groups = [GroupSim(n, _topics_for(n, seed)) for n in by_part.get(part, [])]
            if not groups:
                continue
            budget = records * len(groups) // total_groups
            chunks: list[pa.RecordBatch] = []

            def sink(rows: list[tuple[Any, ...]], chunks: list[pa.RecordBatch] = chunks) -> None:
                cols = list(zip(*rows, strict=True))
                chunks.append(
                    pa.RecordBatch.from_arrays(
                        [pa.array(c, type=f.type) for c, f in zip(cols, LOG_SCHEMA, strict=True)],
                        schema=LOG_SCHEMA,
                    )
                )

            t0 = time.monotonic()
            sim = PartitionSim(part, groups, seed * 1000 + part, budget, sink)
            sim.run()
            keep = {off for off, _ in sim.latest.values()}
            end = sim.now
            for batch in chunks:
                offsets = batch.column(1).to_pylist()
                mask = pa.array([o in keep for o in offsets])
                live = batch.filter(mask)
                old = batch.filter(pa.compute.invert(mask))
                if live.num_rows:
                    lw.write_batch(live)
                    n_log += live.num_rows
                if old.num_rows:
                    hw.write_batch(
                        old.append_column(
                            "compacted_at_ms", pa.array([end] * old.num_rows, pa.int64())
                        )
                    )
                    n_hist += old.num_rows
            print(
                f"[generate] partition {part}: {len(groups)} groups, {sim.appended:,} records, "
                f"{(sim.now - START_MS) / 3_600_000:.1f} h simulated, "
                f"{time.monotonic() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return str(log_path), str(hist_path), n_log, n_hist


def generate(
    out: Path,
    records: int = 1_000_000,
    groups: int | None = None,
    log_partitions: int = 16,
    workers: int = 1,
    seed: int = 7,
) -> dict[str, Any]:
    """Write OUT/log.parquet, history.parquet and manifest.json; return the manifest."""
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    groups = groups or max(4, min(2_000, records // 5_000))
    tmp = tempfile.mkdtemp(prefix="gen-", dir=out)
    parts = list(range(log_partitions))
    shards = [parts[i::workers] for i in range(workers)]
    jobs = [(s, groups, log_partitions, records, seed, tmp) for s in shards if s]
    if workers > 1:
        with get_context("fork").Pool(workers) as pool:
            results = pool.map(_simulate, jobs)
    else:
        results = [_simulate(j) for j in jobs]
    # one file per table, in (partition, offset) order like `coordinator export`
    log_files = sorted(r[0] for r in results)
    topics: dict[str, int] = {}
    for name in _group_names(groups, seed):
        topics.update(_topics_for(name, seed))
    end_offsets: dict[int, int] = {}
    with pq.ParquetWriter(out / "log.parquet", LOG_SCHEMA, compression="zstd") as w:
        rows = []
        for i, (name, n) in enumerate(sorted(topics.items())):
            rec = topic_record(name, TopicValue(n))
            rows.append((TOPIC_PARTITION, i, int(rec.type), rec.key, rec.value, 1, 1, START_MS))
        end_offsets[TOPIC_PARTITION] = len(rows)
        cols = list(zip(*rows, strict=True))
        w.write_table(
            pa.Table.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, LOG_SCHEMA, strict=True)],
                schema=LOG_SCHEMA,
            )
        )
        _merge(w, log_files, end_offsets)
    with pq.ParquetWriter(out / "history.parquet", HISTORY_SCHEMA, compression="zstd") as w:
        _merge(w, sorted(r[1] for r in results), end_offsets)
    for f in [*log_files, *(r[1] for r in results)]:
        os.unlink(f)
    os.rmdir(tmp)
    n_log = sum(r[2] for r in results) + len(topics)
    n_hist = sum(r[3] for r in results)
    manifest = {
        "exported_at_ms": int(time.time() * 1000),
        "log_rows": n_log,
        "history_rows": n_hist,
        "end_offsets": {str(k): v for k, v in sorted(end_offsets.items())},
        "files": {"log": "log.parquet", "history": "history.parquet"},
        "generated": {
            "records": n_log + n_hist,
            "groups": groups,
            "log_partitions": log_partitions,
            "seed": seed,
            "seconds": round(time.monotonic() - t0, 1),
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _merge(writer: pq.ParquetWriter, files: list[str], end_offsets: dict[int, int]) -> None:
    """Append worker files to one table in (partition, offset) order, a row group at a time."""
    tables = [pq.ParquetFile(f) for f in files]
    # each worker file holds whole partitions in increasing order; interleave by partition
    groups: list[tuple[int, int, int]] = []  # (partition, file index, row group)
    for i, pf in enumerate(tables):
        for rg in range(pf.num_row_groups):
            stats = pf.metadata.row_group(rg).column(0).statistics
            groups.append((int(stats.min) if stats is not None else 0, i, rg))
    for _, i, rg in sorted(groups):
        t = tables[i].read_row_group(rg)
        t = t.sort_by([("partition", "ascending"), ("offset", "ascending")])
        writer.write_table(t)
        parts = t.column("partition").to_pylist()
        offs = t.column("offset").to_pylist()
        for p, o in zip(parts, offs, strict=True):
            if o + 1 > end_offsets.get(p, 0):
                end_offsets[p] = o + 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--records", type=int, default=1_000_000, help="records to generate (about)")
    p.add_argument("--groups", type=int, default=None, help="default: records / 5000")
    p.add_argument("--log-partitions", type=int, default=16)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    m = generate(a.out, a.records, a.groups, a.log_partitions, a.workers, a.seed)
    print(
        json.dumps(m["generated"] | {"log_rows": m["log_rows"], "history_rows": m["history_rows"]})
    )


if __name__ == "__main__":
    main()
