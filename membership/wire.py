"""One connection to a Kafka-protocol server: frames, correlation ids, version negotiation, TLS
and SASL. Encoding and decoding are kio's; the SDK builds its requests itself, so it installs
and runs without the coordinator's server. Nothing here knows the group protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import itertools
import ssl as ssl_module
import struct
import types
import typing
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

_SIZE = struct.Struct(">i")
API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
# a reply larger than this is not a group-protocol reply: the connection is dropped
MAX_FRAME_BYTES = 64 * 1024 * 1024


class ConnectionLost(ConnectionError):
    """The connection closed or a request on it timed out; the caller finds the coordinator
    again and retries."""


class AuthenticationFailed(Exception):
    pass


class UnsupportedVersion(Exception):
    pass


class SaslStep:
    """One client token, and what to do with the server's answer to it."""

    def __init__(self, send: bytes, received: Any = None) -> None:
        self.send = send
        self._received = received

    def received(self, data: bytes) -> None:
        if self._received is not None:
            self._received(data)


def sasl_client_tokens(mechanism: str, user: str, password: str) -> Iterator[SaslStep]:
    """The client's side of PLAIN or SCRAM-SHA-256/512 (scramp's client), a step at a time."""
    if mechanism == "PLAIN":
        yield SaslStep(b"\0" + user.encode() + b"\0" + password.encode())
        return
    from scramp import ScramClient

    scram = ScramClient([mechanism], user, password)
    yield SaslStep(
        scram.get_client_first().encode(), lambda data: scram.set_server_first(data.decode())
    )
    yield SaslStep(
        scram.get_client_final().encode(), lambda data: scram.set_server_final(data.decode())
    )


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (it, False)."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str  # "" for an entity
    optional: bool
    array: bool
    entity: type[Any] | None
    required: bool  # no default in the schema


_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = _FIELDS[cls] = _read_fields(cls)
    return cached


def _read_fields(cls: type[Any]) -> tuple[_Field, ...]:
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap(f.type)
        array = typing.get_origin(tp) is tuple
        if array:
            tp, _ = _unwrap(typing.get_args(tp)[0])
        out.append(
            _Field(
                name=f.name,
                kafka_type=str(f.metadata.get("kafka_type", "")),
                optional=optional,
                array=array,
                entity=tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None,
                required=f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING,
            )
        )
    return tuple(out)


_ZEROS: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "error_code": ErrorCode.none,
    "timedelta_i32": timedelta(0),
    "timedelta_i64": timedelta(0),
    "float64": 0.0,
}


def _value(field: _Field, value: Any) -> Any:
    if value is None:
        return None
    if field.array:
        return tuple(_value(dataclasses.replace(field, array=False), item) for item in value)
    if field.entity is not None and isinstance(value, Mapping):
        return build(field.entity, **value)
    if field.kafka_type.startswith("timedelta") and not isinstance(value, timedelta):
        return timedelta(milliseconds=int(value))
    return value


def _zero(field: _Field) -> Any:
    """A field nobody set: null when nullable, else its type's zero."""
    if field.optional:
        return None
    if field.array:
        return ()
    if field.entity is not None:
        return build(field.entity)
    return _ZEROS.get(field.kafka_type, 0)


@functools.cache
def _request_field_names(api_key: int) -> frozenset[str]:
    """Every field name of every version of one API's request, nested entities included."""
    names: set[str] = set()
    classes: list[type[Any]] = []
    for version in range(64):
        with contextlib.suppress(UnknownEntity):
            classes.append(load_request_schema(api_key, version))
    seen: set[type[Any]] = set()
    while classes:
        cls = classes.pop()
        if cls not in seen:
            seen.add(cls)
            names.update(f.name for f in _fields(cls))
            classes.extend(f.entity for f in _fields(cls) if f.entity is not None)
    return frozenset(names)


def build(cls: type[Any], /, **values: Any) -> Any:
    """A kio entity of one version from version-free values: keys the version lacks are
    dropped (one call serves every version), fields not given get their schema default or
    zero, nested entities may be mappings and durations int milliseconds. A key no version of
    the request has is a typo, and fails."""
    api_key = getattr(cls, "__api_key__", None)
    if api_key is not None and values:
        unknown = values.keys() - _request_field_names(int(api_key))
        if unknown:
            raise TypeError(f"{cls.__name__}: no version has field(s) {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for field in _fields(cls):
        if field.name in values:
            kwargs[field.name] = _value(field, values[field.name])
        elif field.required:
            kwargs[field.name] = _zero(field)
    return cls(**kwargs)


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Size-prefixed frame: the request header (v1/v2, as the kio class says) and the body."""
    header_cls = request.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(type(request))(buf, request)
    data = bytearray(buf.getvalue())
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(frame: bytes, response_cls: type[Any]) -> Any:
    _, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(response_cls)(frame, offset)
    return body


class Connection:
    """Requests in flight are matched to replies by correlation id; `versions` holds the
    server's (min, max) per API key from ApiVersions."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], type[Any]]] = {}
        self.versions: dict[int, tuple[int, int]] = {}
        self._reading = asyncio.get_running_loop().create_task(self._read_loop())
        self.closed = False

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str,
        ssl: ssl_module.SSLContext | None = None,
        sasl: tuple[str, str, str] | None = None,
        timeout: float = 10.0,
    ) -> Connection:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=ssl, server_hostname=host if ssl is not None else None
                )
        except (OSError, TimeoutError) as e:
            raise ConnectionLost(f"cannot connect to {host}:{port}: {e}") from e
        conn = cls(reader, writer, client_id)
        try:
            # v2: the newest non-flexible version, served by every broker since 2.0 and by us
            reply = await conn.request(API_VERSIONS, 2, timeout=timeout)
            conn.versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in reply.api_keys
            }
            if sasl is not None:
                await conn._authenticate(*sasl, timeout=timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    def version(self, api_key: int, lowest: int, highest: int) -> int:
        """The highest version both sides speak, within [lowest, highest]."""
        if api_key not in self.versions:
            raise UnsupportedVersion(f"the server does not serve API {api_key}")
        lo, hi = self.versions[api_key]
        chosen = min(hi, highest)
        if chosen < max(lo, lowest):
            raise UnsupportedVersion(f"API {api_key}: server {lo}-{hi}, client {lowest}-{highest}")
        return chosen

    async def _authenticate(self, mechanism: str, user: str, password: str, timeout: float) -> None:
        handshake = await self.request(SASL_HANDSHAKE, 1, timeout=timeout, mechanism=mechanism)
        if handshake.error_code != 0:
            raise AuthenticationFailed(
                f"SaslHandshake {mechanism}: error {int(handshake.error_code)}; the server "
                f"enables {list(handshake.mechanisms)}"
            )
        for step in sasl_client_tokens(mechanism, user, password):
            reply = await self.request(SASL_AUTHENTICATE, 2, timeout=timeout, auth_bytes=step.send)
            if reply.error_code != 0:
                raise AuthenticationFailed(reply.error_message or f"error {int(reply.error_code)}")
            step.received(reply.auth_bytes)

    async def request(self, api_key: int, version: int, *, timeout: float, **values: Any) -> Any:
        """Send one request and await its decoded reply; ConnectionLost when the connection
        drops or the reply does not come within `timeout` (the connection is then closed: a
        late reply would otherwise be matched to nothing)."""
        if self.closed:
            raise ConnectionLost("connection closed")
        req = build(load_request_schema(api_key, version), **values)
        correlation_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (fut, load_response_schema(api_key, version))
        try:
            self._writer.write(encode_request(req, correlation_id, self.client_id))
            await self._writer.drain()
            # not wait_for: on Python 3.11 it drops a cancellation that meets the reply in one
            # turn of the loop, and the heartbeat task cancelled by close() beat on forever
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError as e:
            await self.close()
            raise ConnectionLost(f"no reply to API {api_key} v{version} in {timeout:.1f} s") from e
        except (OSError, ConnectionError) as e:
            await self.close()
            raise ConnectionLost(str(e)) from e
        finally:
            self._pending.pop(correlation_id, None)

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if not 4 <= size <= MAX_FRAME_BYTES:
                    raise ConnectionLost(f"reply frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.get(correlation_id)
                if entry is None or entry[0].done():
                    continue
                fut, response_cls = entry
                try:
                    fut.set_result(decode_response(frame, response_cls))
                except Exception as e:  # an undecodable reply fails that request only
                    fut.set_exception(ConnectionLost(f"undecodable reply: {e}"))
        except (OSError, ConnectionError, asyncio.IncompleteReadError) as e:
            self._fail_pending(ConnectionLost(f"connection closed by the server: {e}"))
        finally:
            self.closed = True

    def _fail_pending(self, error: Exception) -> None:
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        self._fail_pending(ConnectionLost("connection closed"))
        if not self._reading.done() and self._reading is not asyncio.current_task():
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reading
