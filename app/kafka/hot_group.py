"""JoinGroup, SyncGroup and OffsetCommit read with `struct`, beside kio: the rebalance's and the
committers' request side of the hot path app/kafka/hot.py opened for Heartbeat.

A rebalance of N members brings 2N of these frames in one burst. The generic reader walks each
frame's bounds (app/kafka/bounded.py), has kio build its versioned entity, and `decode_*`
turns that into the internal request: on a 1,000-member rebalance that was a fifth of the
node's time. These readers go from the frame to the internal request in one pass,
checking every length against the bytes left before slicing and the array against the request's
element bound before reading it. A frame outside the shape every client sends (tagged fields,
a null where the schema has none, a client id or array over its bound, bytes after the last
field, invalid UTF-8, anything truncated) returns None, and the generic path answers or rejects
it exactly as before. tests/protocol/test_hot_group.py holds both paths to the same requests.
The API rows declare them (`JOIN_GROUP_HOT` ...): the connection calls them before the version
table's generic `decode`.

OffsetCommit is a consumer's most frequent request after Heartbeat (one per poll loop with
auto-commit, one per batch with manual commits); it is read into `OffsetCommitWire`, the shape
`handle_offset_commit` works from whichever reader read the frame.
"""

from __future__ import annotations

import struct
from typing import Final

from app.group.immutable import immutable
from app.group.messages import JoinGroupRequest, SyncGroupRequest
from app.kafka.context import HotPath

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I32X2: Final = struct.Struct(">ii")
_I64: Final = struct.Struct(">q")
# kio reads OffsetCommit's retention (v2-4) as a timedelta, in microseconds of an int64: a
# retention past this many milliseconds either way is a frame the generic path rejects
_MAX_RETENTION_MS: Final = (2**63 - 1) // 1000
_I32_I64: Final = struct.Struct(">iq")
_I32_I64_I32: Final = struct.Struct(">iqi")

# (partition, committed offset, committed leader epoch (-1 before v6), committed metadata)
CommittedPartition = tuple[int, int, int, str | None]


@immutable
class OffsetCommitWire:
    """An OffsetCommit (v2-9) as the client sent it, before the edge's checks (authorization,
    known partitions): read by `read_offset_commit`, or made from kio's entity by
    app/kafka/offset_apis.py's `wire_offset_commit`."""

    version: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None  # v7+
    retention_time_ms: int  # v2-4; -1 after
    topics: tuple[tuple[str, tuple[CommittedPartition, ...]], ...]  # request order


class _NotCommon(Exception):
    """The frame is outside the common shape: the generic reader decides."""


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    b = frame[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = frame[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 28:  # a 32-bit unsigned varint takes at most 5 bytes
            raise _NotCommon


def _take(frame: bytes, pos: int, n: int) -> bytes:
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end]


# The readers below inline `_take` and the one-byte varint: they run once per field of every
# JoinGroup and SyncGroup of a rebalance.


def _string(frame: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end].decode(), end


def _nullable_string(frame: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(frame, pos)
    if n == -1:
        return None, pos + 2
    pos += 2
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end].decode(), end


def _bytes(frame: bytes, pos: int) -> tuple[bytes, int]:
    (n,) = _I32.unpack_from(frame, pos)
    pos += 4
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end], end


def _compact_string(frame: bytes, pos: int) -> tuple[str, int]:
    n = frame[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(frame, pos)
    n -= 1  # -1: null, not allowed here
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end].decode(), end


def _compact_nullable_string(frame: bytes, pos: int) -> tuple[str | None, int]:
    n = frame[pos]
    if n == 0:
        return None, pos + 1
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(frame, pos)  # a long varint may still say null
    n -= 1
    end = pos + n
    if n < 0:
        return None, pos
    if end > len(frame):
        raise _NotCommon
    return frame[pos:end].decode(), end


def _compact_bytes(frame: bytes, pos: int) -> tuple[bytes, int]:
    n = frame[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(frame, pos)
    n -= 1
    end = pos + n
    if n < 0 or end > len(frame):
        raise _NotCommon
    return frame[pos:end], end


def _no_tags(frame: bytes, pos: int) -> int:
    if frame[pos]:
        raise _NotCommon
    return pos + 1


def _header(frame: bytes, flexible: bool, max_client_id: int) -> tuple[str, int]:
    """The request header (v1/v2) after api key, version and correlation id: the client id
    ("" when null, as `RequestContext` holds it) and where the body starts."""
    (n,) = _I16.unpack_from(frame, 8)
    if n > max_client_id:
        raise _NotCommon
    if n < 0:
        client_id, pos = "", 10
    else:
        client_id, pos = _take(frame, 10, n).decode(), 10 + n
    return client_id, (_no_tags(frame, pos) if flexible else pos)


def _count(n: int, max_elements: int) -> int:
    if n < 0 or n > max_elements:  # a null array, or over the request's bound
        raise _NotCommon
    return n


_ERRORS: Final = (_NotCommon, IndexError, struct.error, UnicodeDecodeError)


def read_join_group(
    frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
) -> JoinGroupRequest | None:
    """The JoinGroup (v0-9) in `frame` (header included, no size prefix) as
    `decode_join_group` makes it from kio's entity, or None: the generic path decides."""
    try:
        client_id, pos = _header(frame, version >= 6, max_client_id)
        protocols: list[tuple[str, bytes]] = []
        reason = None
        if version >= 6:
            group_id, pos = _compact_string(frame, pos)
            session_timeout_ms, rebalance_timeout_ms = _I32X2.unpack_from(frame, pos)
            member_id, pos = _compact_string(frame, pos + 8)
            instance_id, pos = _compact_nullable_string(frame, pos)
            protocol_type, pos = _compact_string(frame, pos)
            n, pos = _uvarint(frame, pos)
            for _ in range(_count(n - 1, max_elements)):
                name, pos = _compact_string(frame, pos)
                metadata, pos = _compact_bytes(frame, pos)
                pos = _no_tags(frame, pos)
                protocols.append((name, metadata))
            if version >= 8:
                reason, pos = _compact_nullable_string(frame, pos)
            pos = _no_tags(frame, pos)
        else:
            group_id, pos = _string(frame, pos)
            (session_timeout_ms,) = _I32.unpack_from(frame, pos)
            pos += 4
            # protocol.md §2.5: v0 has no rebalance timeout, the session timeout stands in
            rebalance_timeout_ms = session_timeout_ms
            if version >= 1:
                (rebalance_timeout_ms,) = _I32.unpack_from(frame, pos)
                pos += 4
            member_id, pos = _string(frame, pos)
            instance_id = None
            if version >= 5:
                instance_id, pos = _nullable_string(frame, pos)
            protocol_type, pos = _string(frame, pos)
            (n,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(_count(n, max_elements)):
                name, pos = _string(frame, pos)
                metadata, pos = _bytes(frame, pos)
                protocols.append((name, metadata))
    except _ERRORS:
        return None
    if pos != len(frame):
        return None
    return JoinGroupRequest(  # positional, in field order (see decode_join_group)
        group_id,
        member_id,
        instance_id,
        session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type,
        tuple(protocols),
        client_id,
        client_host,
        reason,
        version >= 4 and instance_id is None,  # require_known_member_id (KIP-394)
        version >= 9,  # supports_skip_assignment (KIP-814)
    )


def read_sync_group(
    frame: bytes, version: int, max_client_id: int, max_elements: int
) -> SyncGroupRequest | None:
    """The SyncGroup (v0-5) in `frame` as `decode_sync_group` makes it, or None."""
    try:
        _client_id, pos = _header(frame, version >= 4, max_client_id)
        assignments: list[tuple[str, bytes]] = []
        instance_id = protocol_type = protocol_name = None
        if version >= 4:
            group_id, pos = _compact_string(frame, pos)
            (generation_id,) = _I32.unpack_from(frame, pos)
            member_id, pos = _compact_string(frame, pos + 4)
            instance_id, pos = _compact_nullable_string(frame, pos)
            if version >= 5:
                protocol_type, pos = _compact_nullable_string(frame, pos)
                protocol_name, pos = _compact_nullable_string(frame, pos)
            n, pos = _uvarint(frame, pos)
            for _ in range(_count(n - 1, max_elements)):
                assigned, pos = _compact_string(frame, pos)
                assignment, pos = _compact_bytes(frame, pos)
                pos = _no_tags(frame, pos)
                assignments.append((assigned, assignment))
            pos = _no_tags(frame, pos)
        else:
            group_id, pos = _string(frame, pos)
            (generation_id,) = _I32.unpack_from(frame, pos)
            member_id, pos = _string(frame, pos + 4)
            if version >= 3:
                instance_id, pos = _nullable_string(frame, pos)
            (n,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(_count(n, max_elements)):
                assigned, pos = _string(frame, pos)
                assignment, pos = _bytes(frame, pos)
                assignments.append((assigned, assignment))
    except _ERRORS:
        return None
    if pos != len(frame):
        return None
    return SyncGroupRequest(
        group_id,
        generation_id,
        member_id,
        instance_id,
        protocol_type,
        protocol_name,
        tuple(assignments),
    )


def read_offset_commit(
    frame: bytes, version: int, max_client_id: int, max_elements: int
) -> OffsetCommitWire | None:
    """The OffsetCommit (v2-9) in `frame` as `wire_offset_commit` makes it from kio's entity, or
    None. The element bound is spent as app/kafka/bounded.py spends it: topics plus partitions."""
    try:
        _client_id, pos = _header(frame, version >= 8, max_client_id)
        topics: list[tuple[str, tuple[CommittedPartition, ...]]] = []
        budget = max_elements
        instance_id = None
        retention_ms = -1
        if version >= 8:
            group_id, pos = _compact_string(frame, pos)
            (generation_id,) = _I32.unpack_from(frame, pos)
            member_id, pos = _compact_string(frame, pos + 4)
            instance_id, pos = _compact_nullable_string(frame, pos)
            n, pos = _uvarint(frame, pos)
            budget -= _count(n - 1, budget)
            for _ in range(n - 1):
                name, pos = _compact_string(frame, pos)
                m, pos = _uvarint(frame, pos)
                budget -= _count(m - 1, budget)
                parts: list[CommittedPartition] = []
                for _ in range(m - 1):
                    partition, offset, epoch = _I32_I64_I32.unpack_from(frame, pos)
                    metadata, pos = _compact_nullable_string(frame, pos + 16)
                    pos = _no_tags(frame, pos)
                    parts.append((partition, offset, epoch, metadata))
                pos = _no_tags(frame, pos)
                topics.append((name, tuple(parts)))
            pos = _no_tags(frame, pos)
        else:
            group_id, pos = _string(frame, pos)
            (generation_id,) = _I32.unpack_from(frame, pos)
            member_id, pos = _string(frame, pos + 4)
            if version >= 7:
                instance_id, pos = _nullable_string(frame, pos)
            if version <= 4:
                (retention_ms,) = _I64.unpack_from(frame, pos)
                pos += 8
            (n,) = _I32.unpack_from(frame, pos)
            pos += 4
            budget -= _count(n, budget)
            for _ in range(n):
                name, pos = _string(frame, pos)
                (m,) = _I32.unpack_from(frame, pos)
                pos += 4
                budget -= _count(m, budget)
                parts = []
                for _ in range(m):
                    if version >= 6:
                        partition, offset, epoch = _I32_I64_I32.unpack_from(frame, pos)
                        pos += 16
                    else:
                        partition, offset = _I32_I64.unpack_from(frame, pos)
                        epoch = -1
                        pos += 12
                    metadata, pos = _nullable_string(frame, pos)
                    parts.append((partition, offset, epoch, metadata))
                topics.append((name, tuple(parts)))
    except _ERRORS:
        return None
    if pos != len(frame) or not -_MAX_RETENTION_MS <= retention_ms <= _MAX_RETENTION_MS:
        return None  # the generic path reads it, or says why not
    return OffsetCommitWire(
        version, group_id, generation_id, member_id, instance_id, retention_ms, tuple(topics)
    )


# The paths the API rows declare (app/kafka/context.py HotPath; the client host is JoinGroup's
# alone).


class JoinGroupHot(HotPath):
    def read(
        self, frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
    ) -> JoinGroupRequest | None:
        return read_join_group(frame, version, max_client_id, max_elements, client_host)


class SyncGroupHot(HotPath):
    def read(
        self, frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
    ) -> SyncGroupRequest | None:
        return read_sync_group(frame, version, max_client_id, max_elements)


class OffsetCommitHot(HotPath):
    def read(
        self, frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
    ) -> OffsetCommitWire | None:
        return read_offset_commit(frame, version, max_client_id, max_elements)


JOIN_GROUP_HOT: Final = JoinGroupHot()
SYNC_GROUP_HOT: Final = SyncGroupHot()
OFFSET_COMMIT_HOT: Final = OffsetCommitHot()
