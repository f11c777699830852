"""Bounded decoding: every request frame is walked against its schema before kio reads it.

kio's native reader reserves memory for an array from the count the frame claims, before it
reads a single element: a DescribeGroups v5 frame of 23 bytes claiming 2^35 groups made it ask
for 256 GiB and abort the process (no `except` can catch that). Kafka's generated parsers reject
any array or string length larger than the bytes that remain; this walk does the same, and
more, before any allocation (protocol.md §11.1):

- every array count, string and bytes length (classic int16/int32 and compact varint forms),
  tagged-field count and tagged-field size must fit in the bytes that remain in the frame;
  an array element takes at least one byte, a fixed-size element its size;
- the header's client id must fit `max_client_id_bytes`;
- the whole walk visits at most `max_elements` array elements and tagged fields, so no request
  buys more than a bounded amount of work (the frame limit bounds the bytes, this the count).

The walk also reports whether the frame carries tagged fields the schema does not know, so the
server strips them (`app/kafka/tagged.py`) instead of letting kio refuse the frame.
"""

from __future__ import annotations

from typing import Any, Final

from app.kafka.codec import field_infos

FIXED_SIZES: Final = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

# Field kinds, resolved once per entity class.
_K_FIXED, _K_STRING, _K_BYTES, _K_ENTITY = range(4)


class FrameRejected(ValueError):
    """The frame breaks a bound; `str(exc)` names the field and the bound."""


class _Field:
    __slots__ = ("array", "entity", "fixed", "kind", "legacy", "name", "optional", "tag")

    def __init__(self, info: Any, is_header: bool) -> None:
        self.name: str = info.name
        self.tag: int | None = info.tag
        self.array: bool = info.array
        self.optional: bool = info.optional
        self.entity: type[Any] | None = info.entity
        # Kafka special-cases RequestHeader.client_id: always a legacy (int16-length) string
        self.legacy = is_header and info.name == "client_id"
        self.fixed = 0
        if info.entity is not None:
            self.kind = _K_ENTITY
        elif info.kafka_type in FIXED_SIZES:
            self.kind = _K_FIXED
            self.fixed = FIXED_SIZES[info.kafka_type]
        elif info.kafka_type == "string":
            self.kind = _K_STRING
        elif info.kafka_type in ("bytes", "records"):
            self.kind = _K_BYTES
        else:
            raise TypeError(f"unsupported kafka type {info.kafka_type!r} in {info.name}")


class _Schema:
    __slots__ = ("flexible", "plain", "tagged")

    def __init__(self, cls: type[Any], is_header: bool) -> None:
        fields = [_Field(i, is_header) for i in field_infos(cls)]
        self.flexible = bool(cls.__flexible__)
        self.plain = tuple(f for f in fields if f.tag is None)
        self.tagged = {f.tag: f for f in fields if f.tag is not None}


_SCHEMAS: dict[tuple[type[Any], bool], _Schema] = {}


def _schema(cls: type[Any], is_header: bool) -> _Schema:
    s = _SCHEMAS.get((cls, is_header))
    if s is None:
        s = _SCHEMAS[(cls, is_header)] = _Schema(cls, is_header)
    return s


class _Walk:
    """One frame's walk. Positions are absolute; `end` is the end of the region being read
    (the frame, or a tagged field's value)."""

    __slots__ = ("budget", "data", "max_client_id", "pos", "unknown_tags")

    def __init__(self, data: bytes, max_elements: int, max_client_id: int) -> None:
        self.data = data
        self.pos = 0
        self.budget = max_elements
        self.max_client_id = max_client_id
        self.unknown_tags = False

    def need(self, n: int, end: int, what: str) -> None:
        if n < 0 or self.pos + n > end:
            raise FrameRejected(f"{what}: {n} bytes claimed, {end - self.pos} remain")

    def spend(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise FrameRejected(f"{what}: more array elements and tagged fields than allowed")

    def uvarint(self, end: int, what: str) -> int:
        data = self.data
        shift = result = 0
        while True:
            if self.pos >= end:
                raise FrameRejected(f"{what}: truncated varint")
            b = data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:  # a 32-bit unsigned varint takes at most 5 bytes
                raise FrameRejected(f"{what}: varint longer than 5 bytes")

    def int16(self, end: int, what: str) -> int:
        self.need(2, end, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 2], "big", signed=True)
        self.pos += 2
        return v

    def int32(self, end: int, what: str) -> int:
        self.need(4, end, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 4], "big", signed=True)
        self.pos += 4
        return v

    def length(self, f: _Field, flexible: bool, end: int) -> int:
        """A string's or bytes' length (-1 for null), after checking it against `end`."""
        if f.kind == _K_STRING and (f.legacy or not flexible):
            n = self.int16(end, f.name)
        elif f.kind == _K_BYTES and not flexible:
            n = self.int32(end, f.name)
        else:
            n = self.uvarint(end, f.name) - 1  # compact: length + 1, 0 = null
        if n < -1:
            raise FrameRejected(f"{f.name}: negative length {n}")
        if n > 0:
            self.need(n, end, f.name)
        return n

    def value(self, f: _Field, flexible: bool, end: int, in_tag: bool) -> None:
        if f.kind == _K_FIXED:
            self.need(f.fixed, end, f.name)
            self.pos += f.fixed
        elif f.kind == _K_ENTITY:
            assert f.entity is not None
            # a nullable struct outside tagged fields carries an int8 marker (KIP-893)
            if f.optional and not in_tag:
                self.need(1, end, f.name)
                self.pos += 1
                if self.data[self.pos - 1] == 0xFF:
                    return
            self.entity(_schema(f.entity, False), end)
        else:
            n = self.length(f, flexible, end)
            if f.legacy and n > self.max_client_id:
                raise FrameRejected(f"client_id of {n} bytes (at most {self.max_client_id})")
            if n > 0:
                self.pos += n

    def field(self, f: _Field, flexible: bool, end: int, in_tag: bool) -> None:
        if not f.array:
            self.value(f, flexible, end, in_tag)
            return
        count = self.uvarint(end, f.name) - 1 if flexible else self.int32(end, f.name)
        if count < -1:
            raise FrameRejected(f"{f.name}: negative array count {count}")
        if count <= 0:
            return
        # every element takes at least one byte, a fixed-size element its size
        self.need(count * (f.fixed or 1), end, f"{f.name} ({count} elements)")
        self.spend(count, f.name)
        if f.kind == _K_FIXED:
            self.pos += count * f.fixed
        elif f.kind == _K_ENTITY:
            assert f.entity is not None
            schema = _schema(f.entity, False)
            for _ in range(count):  # elements carry no presence marker
                self.entity(schema, end)
        else:
            for _ in range(count):
                n = self.length(f, flexible, end)
                if n > 0:
                    self.pos += n

    def entity(self, s: _Schema, end: int) -> None:
        for f in s.plain:
            self.field(f, s.flexible, end, False)
        if not s.flexible:
            return
        n = self.uvarint(end, "tagged fields")
        if n:
            self.need(n, end, f"tagged fields ({n})")
            self.spend(n, "tagged fields")
        for _ in range(n):
            tag = self.uvarint(end, "tag")
            size = self.uvarint(end, f"tag {tag} size")
            self.need(size, end, f"tag {tag}")
            known = s.tagged.get(tag)
            if known is None:
                self.unknown_tags = True
                self.pos += size
                continue
            value_end = self.pos + size
            self.field(known, s.flexible, value_end, True)
            if self.pos != value_end:
                raise FrameRejected(f"tag {tag}: {size} bytes claimed, value took another size")


def has_arrays(cls: type[Any]) -> bool:
    """Whether a schema holds an array at any depth: only those can make kio reserve memory
    from a claimed count. Array-free schemas (Heartbeat, the hot path) skip the walk: kio reads
    their strings, bytes and tags in place and fails on a length past the end (the fuzz tests
    hold it to that), and the header's client id is checked by `check_client_id`."""
    cached = _HAS_ARRAYS.get(cls)
    if cached is None:
        cached = _HAS_ARRAYS[cls] = any(
            f.array or (f.entity is not None and has_arrays(f.entity)) for f in field_infos(cls)
        )
    return cached


_HAS_ARRAYS: dict[type[Any], bool] = {}


def check_client_id(frame: bytes, max_client_id: int) -> None:
    """The request header's client id (v1+: an int16-length string after the first 8 bytes)."""
    n = int.from_bytes(frame[8:10], "big", signed=True)
    if n > max_client_id:
        raise FrameRejected(f"client_id of {n} bytes (at most {max_client_id})")
    if 10 + max(n, 0) > len(frame):
        raise FrameRejected(f"client_id: {n} bytes claimed, {len(frame) - 10} remain")


def check_request(
    request_cls: type[Any], frame: bytes, *, max_elements: int, max_client_id: int
) -> bool:
    """Walk header and body; raise FrameRejected on a broken bound. True when the frame
    carries tagged fields the schema does not know (to be stripped before kio reads it)."""
    walk = _Walk(frame, max_elements, max_client_id)
    end = len(frame)
    walk.entity(_schema(request_cls.__header_schema__, True), end)
    walk.entity(_schema(request_cls, False), end)
    return walk.unknown_tags
