"""Decoding of the consumer protocol's subscription and assignment bytes (protocol.md §12).

The coordinator treats these bytes as opaque except for offset expiry (subscribed topics) and
the admin views. Newer versions only append fields, so the highest known layout is used.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from app.group.immutable import immutable


@immutable
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    generation_id: int  # KIP-792, -1 when absent
    rack_id: str | None


@immutable
class Assignment:
    version: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None


class _R:
    __slots__ = ("b", "p")

    def __init__(self, b: bytes) -> None:
        self.b = b
        self.p = 0

    def i16(self) -> int:
        (v,) = struct.unpack_from(">h", self.b, self.p)
        self.p += 2
        return int(v)

    def i32(self) -> int:
        (v,) = struct.unpack_from(">i", self.b, self.p)
        self.p += 4
        return int(v)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.p + n > len(self.b):
            raise ValueError("truncated string")
        s = self.b[self.p : self.p + n].decode()
        self.p += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        if self.p + n > len(self.b):
            raise ValueError("truncated bytes")
        v = self.b[self.p : self.p + n]
        self.p += n
        return bytes(v)

    def topic_partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for _ in range(max(self.i32(), 0)):
            topic = self.string() or ""
            parts = tuple(self.i32() for _ in range(max(self.i32(), 0)))
            out.append((topic, parts))
        return tuple(out)

    def at_end(self) -> bool:
        return self.p >= len(self.b)


def decode_subscription(data: bytes) -> Subscription:
    r = _R(data)
    version = r.i16()
    topics = tuple(r.string() or "" for _ in range(max(r.i32(), 0)))
    user_data = r.bytes_()
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation = -1
    rack = None
    if version >= 1 and not r.at_end():
        owned = r.topic_partitions()
    if version >= 2 and not r.at_end():
        generation = r.i32()
    if version >= 3 and not r.at_end():
        rack = r.string()
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> Assignment:
    r = _R(data)
    version = r.i16()
    partitions = r.topic_partitions()
    user_data = r.bytes_() if not r.at_end() else None
    return Assignment(version, partitions, user_data)


def assigned_partitions(
    protocol_type: str | None, assignments: Iterable[bytes]
) -> set[tuple[str, int]]:
    """The partitions a consumer group's members' assignments name; an assignment that does
    not decode (opaque bytes) names none."""
    out: set[tuple[str, int]] = set()
    if protocol_type != "consumer":
        return out
    for data in assignments:
        if not data:
            continue
        try:
            parts = decode_assignment(data).partitions
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
        for topic, partitions in parts:
            out.update((topic, p) for p in partitions)
    return out


def subscription_topics(data: bytes) -> set[str] | None:
    try:
        return set(decode_subscription(data).topics)
    except (ValueError, struct.error, UnicodeDecodeError):
        return None
