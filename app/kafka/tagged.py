"""Drop unknown tagged fields from a request frame so kio can decode it.

The protocol says a receiver must skip tagged fields it does not know (that is how fields are
added without a version bump), but kio's native reader fails with
`KeyError('Unknown tagged field tag: N')`. The server decodes with kio first and only on that
error walks the frame here, using kio's dataclass schema to find field boundaries, and copies it
without the unknown tags. Slow path, pure Python.
"""

from __future__ import annotations

import struct
from typing import Any

from app.kafka.bounded import FIXED_SIZES as _FIXED_SIZES
from app.kafka.codec import FieldInfo, field_infos


class MalformedFrame(ValueError):
    """The bytes do not follow the schema (truncated or inconsistent lengths)."""


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedFrame("truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise MalformedFrame("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise MalformedFrame("varint too long")

    def int16(self) -> int:
        value: int = struct.unpack(">h", self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _copy_primitive(kafka_type: str, flexible: bool, legacy_string: bool, cur: _Cursor) -> bytes:
    start = cur.pos
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        cur.take(size)
    elif kafka_type == "string" and (legacy_string or not flexible):
        n = cur.int16()
        if n > 0:
            cur.take(n)
    elif kafka_type in ("bytes", "records") and not flexible:
        n = cur.int32()
        if n > 0:
            cur.take(n)
    elif kafka_type in ("string", "bytes", "records"):
        n = cur.uvarint() - 1  # compact: length + 1, 0 = null
        if n > 0:
            cur.take(n)
    else:
        raise MalformedFrame(f"unsupported kafka type {kafka_type!r}")
    return cur.data[start : cur.pos]


def _copy_field(
    info: FieldInfo, flexible: bool, is_header: bool, cur: _Cursor, out: bytearray, in_tag: bool
) -> None:
    # Kafka special-cases RequestHeader.client_id: always a legacy (int16-length) string.
    legacy_string = is_header and info.name == "client_id"
    if info.array:
        start = cur.pos
        count = cur.uvarint() - 1 if flexible else cur.int32()
        out += cur.data[start : cur.pos]
        for _ in range(max(count, 0)):
            if info.entity is not None:
                _copy_entity(info.entity, cur, out, is_header=False)
            else:
                out += _copy_primitive(info.kafka_type, flexible, False, cur)
        return
    if info.entity is not None:
        # A nullable struct outside tagged fields carries an int8 presence marker (KIP-893);
        # inside a tagged field presence is the tag itself.
        if info.optional and not in_tag:
            marker = cur.take(1)
            out += marker
            if marker == b"\xff":
                return
        _copy_entity(info.entity, cur, out, is_header=False)
        return
    out += _copy_primitive(info.kafka_type, flexible, legacy_string, cur)


def _copy_entity(cls: type[Any], cur: _Cursor, out: bytearray, *, is_header: bool) -> None:
    flexible = bool(cls.__flexible__)
    infos = field_infos(cls)
    for info in infos:
        if info.tag is None:
            _copy_field(info, flexible, is_header, cur, out, in_tag=False)
    if not flexible:
        return
    known = {info.tag: info for info in infos if info.tag is not None}
    kept: list[bytes] = []
    for _ in range(cur.uvarint()):
        tag = cur.uvarint()
        size = cur.uvarint()
        raw = cur.take(size)
        tagged = known.get(tag)
        if tagged is None:
            continue  # the point of this module: unknown tags are skipped
        if tagged.entity is not None or tagged.array:
            inner = bytearray()
            sub = _Cursor(raw)
            _copy_field(tagged, flexible, False, sub, inner, in_tag=True)
            raw = bytes(inner)
        kept.append(uvarint(tag) + uvarint(len(raw)) + raw)
    out += uvarint(len(kept))
    for item in kept:
        out += item


def strip_unknown_tags(request_cls: type[Any], frame: bytes) -> bytes:
    """Return `frame` (header + body, no size prefix) without tagged fields the schema lacks."""
    cur = _Cursor(frame)
    out = bytearray()
    _copy_entity(request_cls.__header_schema__, cur, out, is_header=True)
    _copy_entity(request_cls, cur, out, is_header=False)
    out += frame[cur.pos :]
    return bytes(out)
