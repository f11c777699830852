"""Event-log records and their versioned binary encoding.

A record is (type, key, value); value None is a tombstone. Keys and values start with an int16
version, like Kafka's `__consumer_offsets` records, so later fields can be appended: a reader
decodes the fields it knows for the version it finds and ignores trailing bytes it does not.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final, NamedTuple

from app.group.immutable import immutable


class RecordType(IntEnum):
    GROUP_METADATA = 1
    OFFSET_COMMIT = 2
    TOPIC = 3
    STATIC_REGISTRATION = 4  # static members registered ahead of a scale-up (admin API)


class Record(NamedTuple):
    """What the core asks the log to append, and what replay() consumes. A NamedTuple: a load
    builds one per live key, and tuple construction is several times cheaper than a frozen
    dataclass's __init__."""

    type: RecordType
    key: bytes
    value: bytes | None  # None = tombstone


# --- a tiny big-endian codec -------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16_I32 = struct.Struct(">hi")
_I32_I32 = struct.Struct(">ii")
_I64_I32 = struct.Struct(">qi")
_NULL = _I32.pack(-1)


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> _Writer:
        self.parts.append(_I16.pack(v))
        return self

    def i32(self, v: int) -> _Writer:
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v: int) -> _Writer:
        self.parts.append(_I64.pack(v))
        return self

    def bytes_(self, v: bytes | None) -> _Writer:
        if v is None:
            self.parts.append(_I32.pack(-1))
        else:
            self.parts.append(_I32.pack(len(v)))
            self.parts.append(v)
        return self

    def str_(self, v: str | None) -> _Writer:
        return self.bytes_(None if v is None else v.encode())

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    """Sequential decoder. Loading decodes every live record: strings and byte strings cost
    one struct call and one slice each (`_slice`), not a chain of i32() calls."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def i64(self) -> int:
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def _slice(self) -> bytes | None:
        """A length-prefixed run of bytes (None for length -1), in one struct call."""
        buf, start = self.buf, self.pos + 4
        (n,) = _I32.unpack_from(buf, self.pos)
        if n < 0:
            self.pos = start
            return None
        end = start + n
        if end > len(buf):
            raise ValueError("truncated record")
        self.pos = end
        return buf[start:end]

    def bytes_(self) -> bytes | None:
        b = self._slice()
        return None if b is None else bytes(b)

    def str_(self) -> str | None:
        b = self._slice()
        return None if b is None else b.decode()

    def req_bytes(self) -> bytes:
        b = self.bytes_()
        return b if b is not None else b""

    def req_str(self) -> str:
        s = self.str_()
        return s if s is not None else ""


# --- keys ----------------------------------------------------------------------------------------

KEY_VERSION = 0


def group_key(group_id: str) -> bytes:
    return _Writer().i16(KEY_VERSION).str_(group_id).done()


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    # written out (one per commit): the bytes of _Writer().i16(KEY_VERSION).str_(group_id)
    # .str_(topic).i32(partition).done(), which cost a call per field
    g = group_id.encode()
    t = topic.encode()
    return b"".join(
        (_I16_I32.pack(KEY_VERSION, len(g)), g, _I32.pack(len(t)), t, _I32.pack(partition))
    )


def topic_key(name: str) -> bytes:
    return _Writer().i16(KEY_VERSION).str_(name).done()


def decode_group_key(key: bytes) -> str:
    r = _Reader(key)
    r.i16()
    return r.req_str()


def decode_offset_key(key: bytes) -> tuple[str, str, int]:
    # written out (one per commit, and per offset record of a load): what _Reader's i16(),
    # req_str(), req_str(), i32() read, with the same errors
    group_id, pos = _key_string(key, 2)
    topic, pos = _key_string(key, pos)
    (partition,) = _I32.unpack_from(key, pos)
    return group_id, topic, partition


def _key_string(key: bytes, pos: int) -> tuple[str, int]:
    """The length-prefixed string at `pos` ("" for null) and the position after it."""
    s, pos = _string_at(key, pos)
    return ("" if s is None else s), pos


def decode_topic_key(key: bytes) -> str:
    return decode_group_key(key)


# --- values --------------------------------------------------------------------------------------


@immutable
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # metadata for the selected protocol
    assignment: bytes


@immutable
class GroupMetadataValue:
    protocol_type: str  # "" = none
    generation: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp: int  # -1 = unknown
    members: tuple[MemberValue, ...]
    # v1: what started the rebalance that produced this generation, and when (-1 = unknown)
    rebalance_reason: str | None = None
    rebalance_started_ms: int = -1
    # v2: this record persists a static leader's replacement in Stable whose JoinGroup was
    # answered with SkipAssignment (KIP-814); False for every other record
    skip_assignment: bool = False


GROUP_VALUE_VERSION = 2


def encode_group_value(v: GroupMetadataValue) -> bytes:
    w = _Writer().i16(GROUP_VALUE_VERSION)
    w.str_(v.protocol_type).i32(v.generation).str_(v.protocol_name).str_(v.leader)
    w.i64(v.current_state_timestamp).i32(len(v.members))
    # the members, written out: one record per rebalance holds them all (1000 members: 0.4 ms
    # here, 1.1 ms through _Writer's calls), and it is encoded between the leader's SyncGroup
    # and the write that answers every member
    add, size, timeouts = w.parts.extend, _I32.pack, _I32_I32.pack
    for m in v.members:
        member_id = m.member_id.encode()
        instance = m.group_instance_id
        client_id = m.client_id.encode()
        host = m.client_host.encode()
        sub, assignment = m.subscription, m.assignment
        add((size(len(member_id)), member_id))
        if instance is None:
            add((_NULL,))
        else:
            encoded = instance.encode()
            add((size(len(encoded)), encoded))
        add((
            size(len(client_id)), client_id, size(len(host)), host,
            timeouts(m.rebalance_timeout_ms, m.session_timeout_ms),
            size(len(sub)), sub, size(len(assignment)), assignment,
        ))  # fmt: skip
    w.str_(v.rebalance_reason).i64(v.rebalance_started_ms)
    w.i16(1 if v.skip_assignment else 0)
    return w.done()


# MemberValue's fields, in order
MemberFields = tuple[str, str | None, str, str, int, int, bytes, bytes]
# GroupMetadataValue's fields, in order, the members as MemberFields
GroupFields = tuple[
    str, int, str | None, str | None, int, list[MemberFields], str | None, int, bool
]


def decode_group_fields(buf: bytes) -> GroupFields:
    """A group value's fields as plain tuples: what a load replays, one per group, straight into
    the group's state (decode_group_value's objects would be built only to be read once)."""
    (version,) = _I16.unpack_from(buf, 0)  # each version appends fields to the previous layout
    protocol_type, pos = _string_at(buf, 2)
    (generation,) = _I32.unpack_from(buf, pos)
    protocol_name, pos = _string_at(buf, pos + 4)
    leader, pos = _string_at(buf, pos)
    ts, count = _I64_I32.unpack_from(buf, pos)
    pos += 12
    members: list[MemberFields] = []
    for _ in range(count):
        member_id, pos = _string_at(buf, pos)
        instance, pos = _string_at(buf, pos)
        client_id, pos = _string_at(buf, pos)
        host, pos = _string_at(buf, pos)
        rebalance_ms, session_ms = _I32_I32.unpack_from(buf, pos)
        subscription, pos = _bytes_at(buf, pos + 8)
        assignment, pos = _bytes_at(buf, pos)
        members.append((
            member_id or "", instance, client_id or "", host or "", rebalance_ms, session_ms,
            subscription, assignment,
        ))  # fmt: skip
    reason: str | None = None
    started = -1
    if version >= 1:
        reason, pos = _string_at(buf, pos)
        (started,) = _I64.unpack_from(buf, pos)
        pos += 8
    skip = version >= 2 and _I16.unpack_from(buf, pos)[0] != 0
    protocol_type = protocol_type or ""
    return protocol_type, generation, protocol_name, leader, ts, members, reason, started, skip


def decode_group_value(buf: bytes) -> GroupMetadataValue:
    protocol_type, generation, name, leader, ts, members, reason, started, skip = (
        decode_group_fields(buf)
    )
    return GroupMetadataValue(
        protocol_type,
        generation,
        name,
        leader,
        ts,
        tuple([MemberValue(*m) for m in members]),
        reason,
        started,
        skip,
    )


def _string_at(buf: bytes, pos: int) -> tuple[str | None, int]:
    """The length-prefixed string at `pos` (None for length -1) and the position after it."""
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("truncated record")
    return buf[pos:end].decode(), end


def _bytes_at(buf: bytes, pos: int) -> tuple[bytes, int]:
    """The length-prefixed bytes at `pos` (b"" for null) and the position after it."""
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return b"", pos
    end = pos + n
    if end > len(buf):
        raise ValueError("truncated record")
    return buf[pos:end], end


# OffsetValue.source: who committed (v1)
OFFSET_SOURCE_MEMBER = 0  # a group member, or anyone committing while the group has members
# generation -1 without a member to an Empty group: an offset reset (the admin API,
# kafka-consumer-groups --reset-offsets) or a group-less consumer; Kafka's protocol does not
# tell these apart
OFFSET_SOURCE_RESET = 1
# taken from the upstream cluster's own committed offsets when the group moved in (gateway
# mode's import, v2: `origin` names the upstream cluster)
OFFSET_SOURCE_UPSTREAM = 2


@immutable
class OffsetValue:
    offset: int
    leader_epoch: int  # -1 = none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1 = none (expires by the retention rules of protocol.md §8.4)
    source: int = OFFSET_SOURCE_MEMBER  # v1
    origin: str = ""  # v2: where an imported offset came from (the upstream's cluster id)


OFFSET_VALUE_VERSION = 2  # the highest version; each value is written in the lowest that holds it


_OFFSET_HEAD = struct.Struct(">hqii")  # version, offset, leader epoch, metadata length
_OFFSET_TIMES = struct.Struct(">qq")  # commit and expire timestamps


def encode_offset_value(v: OffsetValue) -> bytes:
    """version, offset, leader epoch, metadata, commit and expire timestamps, then (v1) the
    source, then (v2) the origin: one struct call per fixed run of fields (one value per
    commit)."""
    # members' commits (the hot path) stay v0, byte for byte; resets need v1, imports v2
    version = 0 if v.source == OFFSET_SOURCE_MEMBER else 2 if v.origin else 1
    metadata = v.metadata.encode()
    head = _OFFSET_HEAD.pack(version, v.offset, v.leader_epoch, len(metadata))
    times = _OFFSET_TIMES.pack(v.commit_timestamp, v.expire_timestamp)
    if version == 0:
        return head + metadata + times
    if version == 1:
        return b"".join((head, metadata, times, _I16.pack(v.source)))
    origin = v.origin.encode()
    return b"".join((head, metadata, times, _I16_I32.pack(v.source, len(origin)), origin))


def decode_offset_value(buf: bytes) -> OffsetValue:
    # the most frequent record of all, hence one struct call per fixed run of fields
    version, offset, epoch, n = _OFFSET_HEAD.unpack_from(buf)
    pos = _OFFSET_HEAD.size + max(n, 0)
    if pos > len(buf):
        raise ValueError("truncated record")
    metadata = buf[_OFFSET_HEAD.size : pos].decode() if n > 0 else ""
    committed, expires = _OFFSET_TIMES.unpack_from(buf, pos)
    if version == 0:
        return OffsetValue(offset, epoch, metadata, committed, expires)
    source = _I16.unpack_from(buf, pos + 16)[0]
    if version == 1:
        return OffsetValue(offset, epoch, metadata, committed, expires, source)
    origin, _ = _key_string(buf, pos + 18)
    return OffsetValue(offset, epoch, metadata, committed, expires, source, origin)


@immutable
class TopicValue:
    partitions: int


TOPIC_VALUE_VERSION = 0


def encode_topic_value(v: TopicValue) -> bytes:
    return _Writer().i16(TOPIC_VALUE_VERSION).i32(v.partitions).done()


def decode_topic_value(buf: bytes) -> TopicValue:
    r = _Reader(buf)
    r.i16()
    return TopicValue(r.i32())


@immutable
class RegistrationValue:
    """Static members expected to join (addMembersToGroup). An empty `expected` closes the
    registration; `dropped` then names the instances that never arrived in time."""

    expected: tuple[str, ...]
    expansion_timeout_ms: int
    registered_ms: int
    expansion_started_ms: int  # first JoinGroup of a registered instance; -1 = not yet
    dropped: tuple[str, ...] = ()


REGISTRATION_VALUE_VERSION = 0


def encode_registration_value(v: RegistrationValue) -> bytes:
    w = _Writer().i16(REGISTRATION_VALUE_VERSION).i32(len(v.expected))
    for instance in v.expected:
        w.str_(instance)
    w.i32(v.expansion_timeout_ms).i64(v.registered_ms).i64(v.expansion_started_ms)
    w.i32(len(v.dropped))
    for instance in v.dropped:
        w.str_(instance)
    return w.done()


def decode_registration_value(buf: bytes) -> RegistrationValue:
    r = _Reader(buf)
    r.i16()
    expected = tuple(r.req_str() for _ in range(r.i32()))
    timeout, registered, started = r.i32(), r.i64(), r.i64()
    dropped = tuple(r.req_str() for _ in range(r.i32()))
    return RegistrationValue(expected, timeout, registered, started, dropped)


# --- record constructors -------------------------------------------------------------------------

# read for every record a request writes: not through 3.11's slow enum hook (state.py)
_GROUP_METADATA: Final = RecordType.GROUP_METADATA
_OFFSET_COMMIT: Final = RecordType.OFFSET_COMMIT


def group_record(group_id: str, value: GroupMetadataValue | None) -> Record:
    body = None if value is None else encode_group_value(value)
    return Record(_GROUP_METADATA, group_key(group_id), body)


def offset_record(group_id: str, topic: str, partition: int, value: OffsetValue | None) -> Record:
    body = None if value is None else encode_offset_value(value)
    return Record(_OFFSET_COMMIT, offset_key(group_id, topic, partition), body)


def registration_record(group_id: str, value: RegistrationValue | None) -> Record:
    body = None if value is None else encode_registration_value(value)
    return Record(RecordType.STATIC_REGISTRATION, group_key(group_id), body)


def topic_record(name: str, value: TopicValue | None) -> Record:
    body = None if value is None else encode_topic_value(value)
    return Record(RecordType.TOPIC, topic_key(name), body)
