"""The logs the load and failover figures start from, written straight through EventLog.

`generate_log`: a log as a busy cluster writes it, mostly superseded offset commits (the load
figure's). `groups_log`: a compacted log of Stable groups, every record live (the failover
figure's). `populate` writes either under leases of a fake node, then gives the leases back.
"""

from __future__ import annotations

import heapq
import random
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from app.group.records import (
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RecordType,
    group_record,
    offset_record,
)
from app.runtime.placement import partition_for
from storage.log import AppendBatch, EventLog
from tests.support.consumer_bytes import assignment, subscription

FAKE_NODE = 9999  # the writer of the pre-populated log (never a live node id)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


OFFSET = RecordType.OFFSET_COMMIT
_OFFSET_V0 = struct.Struct(">hqiiqq")


def _offset_value(offset: int, ts: int) -> bytes:
    """encode_offset_value(OffsetValue(offset, -1, "", ts, -1)), precompiled: generating a
    million records through the generic writer takes longer than loading them. The first
    commit of every group is built by records.py and checked against this."""
    return _OFFSET_V0.pack(0, offset, -1, 0, ts, -1)


@dataclass
class _Group:
    gid: str
    part: int  # log partition
    topic: str
    partitions: int
    interval_ms: int
    generation: int = 0
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)  # offset record key per partition


def _metadata(rng: random.Random, g: _Group, ts: int, empty: bool) -> Record:
    g.generation += 1
    n = 0 if empty else rng.randint(1, min(4, g.partitions))
    members = []
    for i in range(n):
        mid = f"consumer-{g.gid}-{i}-{g.generation:08x}-4c1e-9a5b-{i:012x}"
        mine = [p for p in range(g.partitions) if p % n == i]
        members.append(
            MemberValue(
                member_id=mid,
                group_instance_id=None,
                client_id=f"consumer-{i}",
                client_host=f"/10.0.{i}.{rng.randint(1, 254)}",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=300_000,  # nobody expires while the benchmark runs
                subscription=subscription([g.topic]),
                assignment=assignment({g.topic: mine}),
            )
        )
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=g.generation,
        protocol_name="range" if members else None,
        leader=members[0].member_id if members else None,
        current_state_timestamp=ts,
        members=tuple(members),
    )
    return group_record(g.gid, value)


def generate_log(n: int, partitions: int, seed: int = 7) -> dict[int, list[Record]]:
    """About `n` records (exactly n unless n is tiny), by log partition, in append order.

    One group per ~200 records; each consumes one topic of 3..12 partitions and commits every
    partition it consumes every 1..10 s (simulated), so most offset records are superseded;
    a rebalance (5% of a group's events) writes a new generation, 15% of which leave the group
    empty. At the end ~2% of the groups are deleted: a tombstone per offset and for the group.
    Commit timestamps start an hour ago (far inside offsets retention).
    """
    rng = random.Random(seed)
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    if n <= 0:
        return out
    n_groups = max(10, n // 200)
    topics = [(f"topic-{i:03d}", rng.choice((3, 6, 8, 12))) for i in range(max(5, n_groups // 8))]
    groups = []
    for i in range(n_groups):
        topic, parts = rng.choice(topics)
        gid = f"group-{i:06d}"
        groups.append(
            _Group(gid, partition_for(gid, partitions), topic, parts, rng.randint(1000, 10000))
        )
    deleted = set(rng.sample(range(n_groups), max(1, n_groups // 50)))
    tombstones = sum(groups[i].partitions + 1 for i in deleted)
    budget = max(n - tombstones, n_groups)
    start = now_ms() - 3_600_000
    heap = [(start + rng.randint(0, g.interval_ms), i) for i, g in enumerate(groups)]
    heapq.heapify(heap)
    written = 0
    while written < budget:
        ts, i = heapq.heappop(heap)
        g = groups[i]
        if g.generation == 0 or rng.random() < 0.05:
            recs = [_metadata(rng, g, ts, empty=g.generation > 0 and rng.random() < 0.15)]
            if not g.offsets:
                g.offsets = [rng.randint(0, 10_000_000) for _ in range(g.partitions)]
        else:
            recs = []
            if not g.keys:  # first commit: built by records.py, the template of later ones
                for p in range(g.partitions):
                    r = offset_record(g.gid, g.topic, p, OffsetValue(g.offsets[p], -1, "", ts, -1))
                    assert r.value == _offset_value(g.offsets[p], ts)
                    g.keys.append(r.key)
                    recs.append(r)
            else:
                rand = rng.random
                for p in range(g.partitions):
                    g.offsets[p] += int(rand() * 5000)
                    recs.append(Record(OFFSET, g.keys[p], _offset_value(g.offsets[p], ts)))
        recs = recs[: budget - written]
        out[g.part].extend(recs)
        written += len(recs)
        heapq.heappush(heap, (ts + g.interval_ms, i))
    for i in sorted(deleted):
        g = groups[i]
        out[g.part] += [offset_record(g.gid, g.topic, p, None) for p in range(g.partitions)]
        out[g.part].append(group_record(g.gid, None))
    return out


def log_stats(log_: dict[int, list[Record]]) -> dict[str, Any]:
    total = sum(len(v) for v in log_.values())
    keys = {(r.type, r.key) for v in log_.values() for r in v}
    groups = sum(1 for v in log_.values() for r in v if r.type == 1 and r.value is not None)
    return {"records": total, "live_keys": len(keys), "group_metadata": groups}


async def populate(url: str, log_: dict[int, list[Record]], partitions: int) -> float:
    """Write the log through EventLog under leases of FAKE_NODE, then release them."""
    t0 = time.perf_counter()
    ev = await EventLog.open(url, migrate=True)
    try:
        await ev.ensure_log_partitions(partitions)
        epochs = await ev.acquire_leases(list(range(partitions)), FAKE_NODE, 3_600_000, now_ms())
        assert len(epochs) == partitions, f"could not take every lease: {epochs}"
        chunk = 4000  # per partition per transaction (16 partitions -> 64k rows)
        longest = max((len(v) for v in log_.values()), default=0)
        for lo in range(0, longest, chunk):
            batches = [
                AppendBatch(p, epochs[p], FAKE_NODE, recs[lo : lo + chunk])
                for p, recs in log_.items()
                if recs[lo : lo + chunk]
            ]
            await ev.append(batches)
        for p, e in epochs.items():
            assert await ev.release_lease(p, FAKE_NODE, e)
    finally:
        await ev.close()
    return time.perf_counter() - t0


def groups_log(n_groups: int, partitions: int) -> dict[int, list[Record]]:
    """`n_groups` Stable groups of two members with two committed offsets each: 3 live
    records per group, spread over the log partitions as the node would place them."""
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    now = now_ms()
    for g in range(n_groups):
        gid = f"fleet-{g:07d}"
        topic = f"orders-{g % 50:02d}"
        members = tuple(
            MemberValue(
                member_id=f"consumer-{i}-{g:07d}-5f0c-4a8e-9d41-{i:012x}",
                group_instance_id=f"worker-{g:07d}-{i}" if i == 0 else None,
                client_id=f"consumer-{i}",
                client_host=f"/10.1.{g % 250}.{i + 1}",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=300_000,  # nobody expires while the benchmark runs
                subscription=subscription([topic]),
                assignment=assignment({topic: [i]}),
            )
            for i in range(2)
        )
        value = GroupMetadataValue(
            "consumer", 1, "range", members[0].member_id, now, members, "initial", now
        )
        recs = [group_record(gid, value)]
        recs += [
            offset_record(gid, topic, p, OffsetValue(1000 * g + p, -1, "", now, -1))
            for p in range(2)
        ]
        out[partition_for(gid, partitions)] += recs
    return out
