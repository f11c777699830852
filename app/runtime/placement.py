"""Placement: which log partition holds a group, and which live node owns which partition.

A group's partition is Kafka's rule (protocol.md §3.1). The partition-to-node plan is even,
sticky and deterministic: every node computes it from the same lease and node tables, so they
agree without talking to each other (transient disagreement while tables change only delays a
move by one round; design.md §7.1).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# ids up to this many characters have their partition cached (see `partition_for`)
CACHED_ID_LENGTH = 256


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's placement: abs(hashCode) % partitions, abs(INT_MIN) taken as 0.

    Cached for ids of usual length: every request routes by it, and the pure-Python UTF-16
    hash was the single largest cost of a Heartbeat (12% of a node's CPU under heartbeat
    load). Long ids are not cached, so the cache cannot pin a client's megabytes."""
    if len(group_id) <= CACHED_ID_LENGTH:
        return cached_partition_for(group_id, partitions)
    return _partition_for(group_id, partitions)


def _partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    return 0 if h == -(1 << 31) else abs(h) % partitions


# `partition_for` of ids up to CACHED_ID_LENGTH characters, for callers that checked the length
cached_partition_for = functools.lru_cache(maxsize=1 << 16)(_partition_for)


def plan(
    partitions: Iterable[int], nodes: Iterable[int], current: Mapping[int, int]
) -> dict[int, int]:
    """partition -> node. Counts differ by at most one; current owners keep what fits."""
    parts = sorted(set(partitions))
    live = sorted(set(nodes))
    if not live:
        return {}
    base, extra = divmod(len(parts), len(live))
    held: dict[int, int] = {n: 0 for n in live}
    for p in parts:
        owner = current.get(p)
        if owner in held:
            held[owner] += 1
    # the nodes holding most keep the "+1" slots, so a stable cluster moves nothing
    by_holding = sorted(live, key=lambda n: (-held[n], n))
    quota = {n: base + (1 if i < extra else 0) for i, n in enumerate(by_holding)}
    result: dict[int, int] = {}
    for p in parts:
        owner = current.get(p)
        if owner is not None and quota.get(owner, 0) > 0:
            result[p] = owner
            quota[owner] -= 1
    for p in parts:
        if p not in result:
            node = max(live, key=lambda n: (quota[n], -n))
            result[p] = node
            quota[node] -= 1
    return result
