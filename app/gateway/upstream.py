"""The gateway's own connections to the upstream cluster, as a Kafka client makes them.

`UpstreamConfig` is what COORD_UPSTREAM_* says: the bootstrap brokers, the security protocol
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the SASL mechanism and credentials, the TLS files.
`UpstreamLink` is one relaying connection to one broker, paired with one client connection:
frames go out as the client sent them and replies come back in order (a broker answers the
requests of a connection in the order it read them); before relaying, it authenticates as the
gateway. The metadata connection (app/gateway/cluster.py) is the SDK's client connection
(membership/wire.py) with the same settings.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from kio.index import load_request_schema, load_response_schema

from app.config import Settings, upstream_addresses
from membership.wire import (
    AuthenticationFailed,
    ConnectionLost,
    build,
    decode_response,
    encode_request,
    sasl_client_tokens,
)

_SIZE: Final = struct.Struct(">i")
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
# a reply frame from the upstream larger than this closes the link (Fetch's own bound is
# fetch.max.bytes, 50 MiB by default, plus its headers)
MAX_REPLY_BYTES: Final = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True, repr=False)
class UpstreamConfig:
    bootstrap: tuple[tuple[str, int], ...]
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    client_id: str = "coordinator-gateway"
    timeout_s: float = 10.0

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> tuple[str, str, str] | None:
        if self.security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        return (self.sasl_mechanism, self.sasl_username, self.sasl_password)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile or None)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile or None)
        return ctx

    @classmethod
    def from_settings(cls, settings: Settings) -> UpstreamConfig:
        return cls(
            bootstrap=upstream_addresses(settings.upstream_bootstrap),
            security_protocol=settings.upstream_security_protocol,
            sasl_mechanism=settings.upstream_sasl_mechanism,
            sasl_username=settings.upstream_sasl_username,
            sasl_password=settings.upstream_sasl_password.get_secret_value(),
            ssl_cafile=settings.upstream_ssl_cafile,
            ssl_certfile=settings.upstream_ssl_certfile,
            ssl_keyfile=settings.upstream_ssl_keyfile,
            client_id=f"coordinator-gateway-{settings.node_id}",
            timeout_s=settings.upstream_timeout_ms / 1000,
        )

    def __repr__(self) -> str:  # the password never reaches a log line
        shown = "***" if self.sasl_password else ""
        return (
            f"UpstreamConfig(bootstrap={self.bootstrap!r}, security_protocol="
            f"{self.security_protocol}, sasl_mechanism={self.sasl_mechanism}, "
            f"sasl_username={self.sasl_username!r}, sasl_password={shown!r})"
        )


class LinkOwner(Protocol):
    """The client connection a link relays for."""

    def upstream_frame(self, frame: bytes) -> None:
        """One reply frame, its size prefix included."""

    def upstream_writable(self, writable: bool) -> None: ...

    def upstream_lost(self, reason: str) -> None: ...


class UpstreamLink(asyncio.Protocol):
    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.owner: LinkOwner | None = None
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._need = 4  # bytes the frame being received needs in `_buf`
        # while authenticating: (correlation id, reply future, response class) in order
        self._calls: deque[tuple[int, asyncio.Future[Any], type[Any]]] = deque()
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.reading = True

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:  # a large reply arrives in many reads: copied once
                return
            data = bytes(buf)
            buf.clear()
        pos, available = 0, len(data)
        need = 4
        while available - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if not 4 <= size <= MAX_REPLY_BYTES:
                self._fail(f"reply frame of {size} bytes")
                return
            end = pos + 4 + size
            if end > available:
                need = end - pos
                break
            self._frame(data[pos:end] if pos or end != available else data)
            pos = end
            if self.closed:
                return
        if pos < available:
            buf += memoryview(data)[pos:]
            self._need = need

    def pause_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_writable(False)

    def resume_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_writable(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection to {self.address[0]}:{self.address[1]} lost: {exc or 'closed'}")

    # --- relaying ------------------------------------------------------------------------------

    def send(self, size: bytes, frame: bytes) -> None:
        """One request frame (`size` its 4-byte prefix), as the client sent it."""
        if self._transport is not None and not self.closed:
            self._transport.writelines((size, frame))

    def pause_reading(self) -> None:
        if self.reading and self._transport is not None and not self.closed:
            self.reading = False
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.reading and self._transport is not None and not self.closed:
            self.reading = True
            self._transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        self.owner = None
        if self._transport is not None:
            self._transport.close()

    def _frame(self, frame: bytes) -> None:
        if self._calls:
            correlation_id, fut, response_cls = self._calls.popleft()
            if _SIZE.unpack_from(frame, 4)[0] != correlation_id:
                self._fail("reply out of order while authenticating")
                return
            if not fut.done():
                try:
                    fut.set_result(decode_response(frame[4:], response_cls))
                except Exception as exc:
                    fut.set_exception(ConnectionLost(f"undecodable reply: {exc}"))
            return
        if self.owner is not None:
            self.owner.upstream_frame(frame)

    def _fail(self, reason: str) -> None:
        if self.closed and self._lost.done():
            return
        self.closed = True
        for _, fut, _ in self._calls:
            if not fut.done():
                fut.set_exception(ConnectionLost(reason))
        self._calls.clear()
        if not self._lost.done():
            self._lost.set_result(None)
        owner, self.owner = self.owner, None
        if self._transport is not None:
            self._transport.close()
        if owner is not None:
            owner.upstream_lost(reason)

    # --- authenticating as the gateway ------------------------------------------------------

    async def call(self, api_key: int, version: int, timeout: float, **values: Any) -> Any:
        correlation_id = -(len(self._calls) + 1)  # never one a client sends after us
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls.append((correlation_id, fut, load_response_schema(api_key, version)))
        request = build(load_request_schema(api_key, version), **values)
        assert self._transport is not None
        self._transport.write(encode_request(request, correlation_id, "coordinator-gateway"))
        async with asyncio.timeout(timeout):
            return await fut

    async def authenticate(self, mechanism: str, user: str, password: str, timeout: float) -> None:
        handshake = await self.call(SASL_HANDSHAKE, 1, timeout, mechanism=mechanism)
        if handshake.error_code != 0:
            raise AuthenticationFailed(
                f"upstream SaslHandshake {mechanism}: error {int(handshake.error_code)}; it "
                f"enables {list(handshake.mechanisms)}"
            )
        for step in sasl_client_tokens(mechanism, user, password):
            reply = await self.call(SASL_AUTHENTICATE, 2, timeout, auth_bytes=step.send)
            if reply.error_code != 0:
                raise AuthenticationFailed(
                    f"upstream SASL {mechanism} as {user!r}: "
                    f"{reply.error_message or int(reply.error_code)}"
                )
            step.received(reply.auth_bytes)


async def open_link(
    config: UpstreamConfig, address: tuple[str, int], context: ssl.SSLContext | None
) -> UpstreamLink:
    """A link to the broker at `address`, authenticated as the gateway; ConnectionLost or
    AuthenticationFailed (with the reason) when it cannot be made within the timeout."""
    loop = asyncio.get_running_loop()
    host, port = address
    link: UpstreamLink | None = None
    try:
        async with asyncio.timeout(config.timeout_s):
            _, link = await loop.create_connection(
                lambda: UpstreamLink(address),
                host,
                port,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
            sasl = config.sasl
            if sasl is not None:
                await link.authenticate(*sasl, timeout=config.timeout_s)
    except (OSError, TimeoutError, ssl.SSLError) as e:
        if link is not None:
            link.close()
        raise ConnectionLost(f"cannot reach upstream broker {host}:{port}: {e}") from e
    except BaseException:
        if link is not None:
            link.close()
        raise
    return link
