"""kio glue: building versioned kio objects generically, frame encoding, small conversions.

kio types stay inside `app/kafka`; everything the rest of the project sees is an internal type
from `app.group.messages`.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Final, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from app.group.messages import Error

T = TypeVar("T")

_ONE_MS: Final = timedelta(milliseconds=1)
_ZERO_UUID: Final = uuid.UUID(int=0)
INT32_MIN: Final = -(2**31)  # "authorized operations not computed" in Kafka's schemas


# --- conversions -----------------------------------------------------------------------------


def ms(value: timedelta) -> int:
    """kio decodes int32/int64 durations as timedelta; the core speaks milliseconds."""
    return value // _ONE_MS


@functools.lru_cache(maxsize=256)
def td(milliseconds: int) -> timedelta:
    return timedelta(milliseconds=milliseconds)


_ERROR_CODES: Final[dict[int, ErrorCode]] = {int(code): code for code in ErrorCode}


def error_code(error: int) -> ErrorCode:
    """Internal `Error` (or any int) -> kio's ErrorCode enum."""
    try:
        return _ERROR_CODES[error]
    except KeyError:
        return ErrorCode.unknown_server_error


def to_error(code: int) -> Error:
    try:
        return Error(int(code))
    except ValueError:
        return Error.UNKNOWN_SERVER_ERROR


# --- schema lookup ---------------------------------------------------------------------------


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


# --- field introspection (our own, so we do not lean on kio's private modules) -----------------


@dataclasses.dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    kafka_type: str  # "" for entity fields
    optional: bool
    array: bool
    entity: type[Any] | None  # nested entity class, if any
    tag: int | None
    default: Any  # dataclasses.MISSING when the field has none


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


_FIELD_INFOS: dict[type[Any], tuple[FieldInfo, ...]] = {}


def field_infos(cls: type[Any]) -> tuple[FieldInfo, ...]:
    cached = _FIELD_INFOS.get(cls)
    if cached is None:
        cached = _FIELD_INFOS[cls] = _field_infos(cls)
    return cached


def _field_infos(cls: type[Any]) -> tuple[FieldInfo, ...]:
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = _strip_optional(f.type)
        array = False
        if typing.get_origin(tp) is tuple:
            array = True
            tp = typing.get_args(tp)[0]
            tp, _ = _strip_optional(tp)
        # Arrays carry their nullability on the array itself: `tuple[X, ...] | None`.
        entity = tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None
        tag = f.metadata.get("tag")
        default: Any = f.default
        factory: Any = f.default_factory
        if default is dataclasses.MISSING and factory is not dataclasses.MISSING:
            default = factory()
        out.append(
            FieldInfo(
                name=f.name,
                kafka_type=str(f.metadata.get("kafka_type", "")),
                optional=optional,
                array=array,
                entity=entity,
                tag=None if tag is None else int(tag),
                default=default,
            )
        )
    return tuple(out)


def _zero(info: FieldInfo) -> Any:
    """Value for a field nobody set: null when nullable, else the type's zero."""
    if info.optional:
        return None
    if info.array:
        return ()
    if info.entity is not None:
        return build(info.entity)
    kt = info.kafka_type
    if kt in ("string",):
        return ""
    if kt in ("bytes", "records"):
        return b""
    if kt == "bool":
        return False
    if kt == "error_code":
        return ErrorCode.none
    if kt in ("timedelta_i32", "timedelta_i64"):
        return td(0)
    if kt == "uuid":
        return _ZERO_UUID
    if kt == "float64":
        return 0.0
    if kt == "datetime_i64":
        raise TypeError(f"field {info.name} (datetime_i64) must be given explicitly")
    return 0


# --- generic builder -------------------------------------------------------------------------


@functools.cache
def _api_field_names(api_key: int) -> frozenset[str]:
    """Every field name of every version (request and response, nested too) of one API.

    `build` drops keys the chosen version lacks; a key no version knows is a typo, not a
    version difference, so it fails loudly.
    """
    names: set[str] = set()
    seen: set[type[Any]] = set()

    def walk(cls: type[Any]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for info in field_infos(cls):
            names.add(info.name)
            if info.entity is not None:
                walk(info.entity)

    from kio.index import UnknownEntity

    for loader in (load_request_schema, load_response_schema):
        for version in range(0, 64):
            try:
                walk(loader(api_key, version))
            except UnknownEntity:
                continue
    return frozenset(names)


def _convert(info: FieldInfo, value: Any) -> Any:
    if value is None:
        return None
    if info.entity is not None:
        if info.array:
            return tuple(
                build(info.entity, **item) if isinstance(item, Mapping) else item for item in value
            )
        return build(info.entity, **value) if isinstance(value, Mapping) else value
    if info.array:
        return tuple(value)
    kt = info.kafka_type
    if kt == "error_code":
        return value if isinstance(value, ErrorCode) else error_code(int(value))
    if kt in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, timedelta) else td(int(value))
    return value


def build(cls: type[T], /, **values: Any) -> T:
    """Build a kio entity of one specific version from version-agnostic values.

    Keys the class does not have are dropped (that is how one call site serves every version);
    missing fields get the schema default, else null/zero. Nested entities may be given as
    mappings, durations as int milliseconds, error codes as ints or `Error`.
    """
    infos = field_infos(cls)
    api_key = getattr(cls, "__api_key__", None)
    if api_key is not None and values:
        unknown = values.keys() - _api_field_names(int(api_key))
        if unknown:
            raise TypeError(f"{cls.__name__}: no version has field(s) {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for info in infos:
        if info.name in values:
            kwargs[info.name] = _convert(info, values[info.name])
        elif info.default is dataclasses.MISSING:
            kwargs[info.name] = _zero(info)
    return cls(**kwargs)


def has_field(cls: type[Any], name: str) -> bool:
    return any(info.name == name for info in field_infos(cls))


# --- frames ----------------------------------------------------------------------------------

_SIZE_CORR = struct.Struct(">ii")


def encode_body(payload: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(payload))(buf, payload)
    return buf.getvalue()


_BYTE: Final = tuple(bytes((i,)) for i in range(0x80))
_COUNT: Final = struct.Struct(">i")


def uvarint(n: int) -> bytes:
    """An unsigned varint, as flexible versions write lengths and counts (n + 1)."""
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Sizes of the fixed-width kio types that may follow an array `with_array` splices into.
_FIXED_WIDTH: Final[dict[str, int]] = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "bool": 1,
}


def element_class(cls: type[Any], field: str) -> type[Any]:
    """The nested entity class of the array `field` of `cls`."""
    for info in field_infos(cls):
        if info.name == field and info.array and info.entity is not None:
            return info.entity
    raise TypeError(f"{cls.__name__}.{field} is not an array of entities")


def with_array(cls: type[Any], empty: bytes, field: str, elements: list[bytes]) -> bytes:
    """kio's body of a `cls` whose array `field` holds `elements` (each one's own bytes, as
    `encode_body(build(element_class(cls, field), ...))` writes it), from `empty`, the body
    kio wrote with that array empty. The elements can then be encoded a slice at a time: a
    reply of thousands of them is never written in one piece. Only fixed-width fields (and an
    empty tagged-fields section) may follow the array."""
    infos = field_infos(cls)
    names = [info.name for info in infos]
    tail = sum(_FIXED_WIDTH[info.kafka_type] for info in infos[names.index(field) + 1 :])
    flexible = bool(cls.__flexible__)
    if flexible:
        tail += 1  # the body's tagged fields: none (checked below)
    cut = len(empty) - tail - (1 if flexible else 4)
    empty_array = b"\x01" if flexible else b"\x00\x00\x00\x00"
    if empty[cut : cut + len(empty_array)] != empty_array or (flexible and empty[-1] != 0):
        raise ValueError(f"{cls.__name__}: {field} is not where with_array expects it")
    count = uvarint(len(elements) + 1) if flexible else _COUNT.pack(len(elements))
    return b"".join((empty[:cut], count, *elements, empty[len(empty) - tail :]))


def frame_response(correlation_id: int, flexible_header: bool, body: bytes) -> bytes:
    """Size prefix + response header (v0: correlation id; v1: plus empty tagged fields) + body."""
    if flexible_header:
        return _SIZE_CORR.pack(len(body) + 5, correlation_id) + b"\x00" + body
    return _SIZE_CORR.pack(len(body) + 4, correlation_id) + body


def response_header_flexible(response_cls: type[Any]) -> bool:
    return int(response_cls.__header_schema__.__version__) >= 1


def group_by_topic(items: Iterable[tuple[str, T]]) -> dict[str, list[T]]:
    """Preserve first-seen topic order (responses mirror request order)."""
    out: dict[str, list[T]] = {}
    for topic, item in items:
        out.setdefault(topic, []).append(item)
    return out
