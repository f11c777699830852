"""Heartbeat's hot path beside kio: the request read with `struct`, the reply packed by hand.

Heartbeats are most of a Stable fleet's traffic (one per member every few seconds), and kio's
generic reader plus a request context cost several times the work the coordinator does for one.
A frame in the shape every client sends (no tagged fields, one-byte compact lengths, valid
UTF-8, nothing after the last field) is read here. Anything else returns None and takes the
generic path (bounds walk, kio), which answers or rejects it exactly as before; the fuzz and
codec tests hold both paths to the same answers (tests/protocol/test_hot_heartbeat.py).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final

from app.group.messages import Error
from app.kafka.codec import frame_response
from app.kafka.context import FixedReply, HotPath
from app.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from app.security.manager import SecurityManager
    from app.service import CoordinatorService

HEARTBEAT_MAX_VERSION: Final = 4

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_HB_V0: Final = struct.Struct(">h")
_HB_V1: Final = struct.Struct(">ih")


def encode_heartbeat_body(error: Error, version: int) -> bytes:
    """The reply body, packed by hand (v0 error; v1-3 throttle + error; v4 + no tags)."""
    if version == 0:
        return _HB_V0.pack(error)
    if version < 4:
        return _HB_V1.pack(0, error)
    return _HB_V1.pack(0, error) + b"\x00"


# group id, generation id, member id, group instance id
HeartbeatFields = tuple[str, int, str, str | None]


def read_heartbeat(frame: bytes, version: int, max_client_id: int) -> HeartbeatFields | None:
    """The fields of the Heartbeat (v0-4) in `frame` (header included, no size prefix), or
    None when the frame is not in the common shape and the generic reader must look at it."""
    try:
        # request header v1/v2: api key, version, correlation id, then the client id
        (n,) = _I16.unpack_from(frame, 8)
        if n > max_client_id:
            return None
        pos = 10 + (n if n > 0 else 0)
        if version >= 4:
            if frame[pos]:  # header tagged fields
                return None
            pos += 1
            # compact strings: uvarint(length + 1), one byte for ids under 127 bytes
            size = frame[pos] - 1
            if size < 0 or size >= 0x7F:
                return None
            pos += 1
            group_id = frame[pos : pos + size].decode()
            pos += size
            (generation,) = _I32.unpack_from(frame, pos)
            pos += 4
            size = frame[pos] - 1
            if size < 0 or size >= 0x7F:
                return None
            pos += 1
            member_id = frame[pos : pos + size].decode()
            pos += size
            size = frame[pos] - 1
            if size == -1:
                instance_id = None
            elif size >= 0x7F:
                return None
            else:
                instance_id = frame[pos + 1 : pos + 1 + size].decode()
                pos += size
            pos += 1
            if frame[pos]:  # body tagged fields
                return None
            pos += 1
        else:
            (size,) = _I16.unpack_from(frame, pos)
            if size < 0:
                return None
            pos += 2
            group_id = frame[pos : pos + size].decode()
            pos += size
            (generation,) = _I32.unpack_from(frame, pos)
            pos += 4
            (size,) = _I16.unpack_from(frame, pos)
            if size < 0:
                return None
            pos += 2
            member_id = frame[pos : pos + size].decode()
            pos += size
            instance_id = None
            if version >= 3:
                (size,) = _I16.unpack_from(frame, pos)
                pos += 2
                if size >= 0:
                    instance_id = frame[pos : pos + size].decode()
                    pos += size
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    if pos != len(frame):  # short strings (a slice past the end is short) or trailing bytes
        return None
    return group_id, generation, member_id, instance_id


# A connection remembers the Heartbeat frames it read, by their bytes after the correlation id:
# a member sends the same bytes every time until its generation changes, so the next one costs
# a dict lookup instead of a read (the read was a sixth of a heartbeat's cost). Bounded per
# connection: at most MEMO_FRAMES frames of at most MEMO_FRAME_BYTES bytes (16 KiB), forgotten
# all at once when full. One member per connection is the common case; the slots are for
# clients that multiplex members over one connection.
MEMO_FRAMES: Final = 16
MEMO_FRAME_BYTES: Final = 1024


class HeartbeatReader:
    """`read_heartbeat` with the connection's memo of the frames it already read."""

    __slots__ = ("_max_client_id", "memo")

    def __init__(self, max_client_id: int) -> None:
        self._max_client_id = max_client_id
        # frame bytes after the correlation id -> (version, fields); the connection looks
        # frames up here before it even cuts them out of a read
        self.memo: dict[bytes, tuple[int, HeartbeatFields]] = {}

    def read(self, frame: bytes, version: int) -> HeartbeatFields | None:
        key = frame[8:]
        seen = self.memo.get(key)
        if seen is not None and seen[0] == version:
            return seen[1]
        fields = read_heartbeat(frame, version, self._max_client_id)
        if fields is not None and len(frame) <= MEMO_FRAME_BYTES:
            if len(self.memo) >= MEMO_FRAMES:
                self.memo.clear()
            self.memo[key] = (version, fields)
        return fields


# What a Heartbeat's answer is made of, per version and error (a handful of entries): the
# connection writes its pieces around the request's own correlation id bytes.
_ANSWERS: list[dict[Error, FixedReply]] = [{} for _ in range(HEARTBEAT_MAX_VERSION + 1)]


def heartbeat_answer(version: int, error: Error) -> FixedReply:
    """The pieces of `frame_response(encode_heartbeat_body(error, version))` (0 <= version
    <= HEARTBEAT_MAX_VERSION) around its correlation id."""
    answers = _ANSWERS[version]
    answer = answers.get(error)
    if answer is None:
        whole = frame_response(0, version >= 4, encode_heartbeat_body(error, version))
        answer = answers[error] = FixedReply(whole[:4], whole[8:], ("Heartbeat", version, error))
    return answer


class HeartbeatHot(HotPath):
    """Heartbeat's fast path: `read_heartbeat` with the connection's memo, what
    `handle_heartbeat` answers, and the reply's pieces."""

    def __init__(self) -> None:
        super().__init__(answers=True)

    def read(
        self, frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
    ) -> HeartbeatFields | None:
        return read_heartbeat(frame, version, max_client_id)

    def memo_reader(self, max_client_id: int) -> HeartbeatReader:
        return HeartbeatReader(max_client_id)

    def answer(
        self,
        service: CoordinatorService,
        security: SecurityManager | None,
        principal: str,
        ip: str,
        request: Any,
        clock: tuple[int, int],
    ) -> Error:
        group_id, generation_id, member_id, instance_id = request
        if security is not None and not security.authorize(
            principal, ip, AclOperation.READ, ResourceType.GROUP, group_id
        ):
            return Error.GROUP_AUTHORIZATION_FAILED
        return service.heartbeat(group_id, generation_id, member_id, instance_id, clock)

    def encode(self, version: int, error: Error) -> FixedReply:
        return heartbeat_answer(version, error)


HEARTBEAT_HOT: Final = HeartbeatHot()
