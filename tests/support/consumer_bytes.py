"""The consumer protocol's bytes, as a Kafka consumer sends them in JoinGroup and SyncGroup:
ConsumerProtocolSubscription and ConsumerProtocolAssignment (v0..v3), and Kafka's range
assignor. Written independently of app/group/consumer_protocol.py, which decodes them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def _topic_partitions(tps: Mapping[str, Sequence[int]]) -> bytes:
    out = struct.pack(">i", len(tps))
    for topic, parts in tps.items():
        out += _str(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out


def subscription(
    topics: Sequence[str],
    *,
    version: int = 0,
    owned: Mapping[str, Sequence[int]] | None = None,
    generation: int = -1,
    rack: str | None = None,
    user_data: bytes | None = None,
) -> bytes:
    """ConsumerProtocolSubscription: topics and user data (v0), owned partitions (v1), the
    generation (v2, KIP-792), the rack (v3). A new object on every call."""
    out = struct.pack(">hi", version, len(topics))
    out += b"".join(_str(t) for t in topics) + _bytes(user_data)
    if version >= 1:
        out += _topic_partitions(owned or {})
    if version >= 2:
        out += struct.pack(">i", generation)
    if version >= 3:
        out += _str(rack)
    return out


def assignment(
    partitions: Mapping[str, Sequence[int]], *, version: int = 0, user_data: bytes | None = None
) -> bytes:
    """ConsumerProtocolAssignment: topic -> partitions, in the mapping's order, and user data
    (every version has this layout)."""
    return struct.pack(">h", version) + _topic_partitions(partitions) + _bytes(user_data)


def range_assign(
    member_ids: Sequence[str], topics: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's range assignor over members sorted by id (every member subscribes to every
    topic): per topic, contiguous ranges, the first `count % members` one partition longer.
    A member that gets nothing of a topic has no entry for it."""
    ids = sorted(member_ids)
    out: dict[str, dict[str, list[int]]] = {m: {} for m in ids}
    for topic, n in topics.items():
        per, extra = divmod(n, len(ids))
        start = 0
        for i, m in enumerate(ids):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][topic] = list(range(start, start + count))
            start += count
    return out
