"""TLS for the Kafka listener, with every handshake off the event loop.

asyncio's own TLS runs the handshake's public-key work on the loop thread: a storm of
connecting clients would then delay the heartbeats of connected members. `TlsLayer` sits
between the socket and the Kafka protocol instead: the handshake steps (`SSLObject` over
memory BIOs; OpenSSL releases the GIL while it computes) run on the security threads, and only
the cheap record encryption of an established session runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, cast

from app.security.listeners import Listener, Settings

log = logging.getLogger(__name__)

# A client's handshake messages fit in a few KiB (its certificate chain included); more bytes
# before the handshake is done is a client not speaking TLS, or not speaking it for us.
MAX_HANDSHAKE_BYTES: Final = 256 * 1024
_READ_CHUNK: Final = 256 * 1024

CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

Offload = Callable[..., Awaitable[Any]]


def server_context(
    certfile: str, keyfile: str, cafile: str = "", client_auth: str = "none"
) -> ssl.SSLContext:
    """The listener's context: TLS 1.2+, our certificate, client certificates as configured
    (Kafka's ssl.client.auth)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if cafile:
        context.load_verify_locations(cafile)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def listeners_context(settings: Settings, listeners: Sequence[Listener]) -> ssl.SSLContext | None:
    """The TLS context of the node's SSL and SASL_SSL listeners (None when it has none)."""
    if not any(li.protocol.tls for li in listeners):
        return None
    return server_context(
        settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_cafile, settings.ssl_client_auth
    )


class TlsTransport(asyncio.Transport):
    """What the Kafka protocol above sees: writes are encrypted, flow control is the socket's."""

    def __init__(self, layer: TlsLayer) -> None:
        super().__init__()
        self._layer = layer

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._layer.write(bytes(data))

    def close(self) -> None:
        self._layer.close()

    def abort(self) -> None:
        self._layer.close()

    def is_closing(self) -> bool:
        return self._layer.closing

    def pause_reading(self) -> None:
        self._layer.raw.pause_reading()

    def resume_reading(self) -> None:
        self._layer.raw.resume_reading()

    def is_reading(self) -> bool:
        return self._layer.raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._layer.raw.get_write_buffer_size()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return self._layer.peercert
        if name == "ssl_object":
            return self._layer.sslobj
        return self._layer.raw.get_extra_info(name, default)


class TlsLayer(asyncio.Protocol):
    """The socket's protocol for a TLS listener; `inner` (the Kafka connection) gets the
    plaintext once the handshake is done, and `established(peercert)` is called on it then."""

    def __init__(self, inner: asyncio.Protocol, context: ssl.SSLContext, offload: Offload) -> None:
        self.inner = inner
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.sslobj = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._offload = offload
        self.raw: asyncio.Transport = cast(asyncio.Transport, None)
        self.established = False
        self.closing = False
        self.peercert: dict[str, Any] | None = None
        self._pending: list[bytes] = []  # bytes that arrived while a handshake step ran
        self._pending_size = 0
        self._stepping = False

    # --- from the socket ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        self.inner.connection_made(TlsTransport(self))

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if self.established:
            self._incoming.write(data)
            self._deliver()
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size > MAX_HANDSHAKE_BYTES:
            self._fail(f"{self._pending_size} bytes sent before the TLS handshake completed")
            return
        self._step()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # --- the handshake, off the loop ---------------------------------------------------------

    def _step(self) -> None:
        if self._stepping or not self._pending or self.closing:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        self._stepping = True
        asyncio.get_running_loop().create_task(self._run_step(data), name="tls-handshake")

    def _handshake(self, data: bytes) -> tuple[bytes, bool]:
        """On a security thread: feed the peer's bytes, advance the handshake."""
        self._incoming.write(data)
        try:
            self.sslobj.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        return self._outgoing.read(), done

    async def _run_step(self, data: bytes) -> None:
        try:
            out, done = await self._offload(self._handshake, data)
        except (ssl.SSLError, OSError) as e:
            self._stepping = False
            self._fail(f"TLS handshake failed: {e}")
            return
        except Exception as e:  # the offload threads were shut down: the node stops
            self._stepping = False
            self._fail(f"TLS handshake not completed: {e!r}")
            return
        self._stepping = False
        if self.closing:
            return
        if out:
            self.raw.write(out)
        if not done:
            self._step()
            return
        self.established = True
        self.peercert = self.sslobj.getpeercert() or None
        established = getattr(self.inner, "tls_established", None)
        if established is not None:
            established(self.peercert)
        # bytes that came with or after the client's Finished are application data
        if self._pending:
            self._incoming.write(b"".join(self._pending))
            self._pending.clear()
            self._pending_size = 0
        self._deliver()

    # --- established: records on the loop ------------------------------------------------------

    def _deliver(self) -> None:
        chunks = []
        peer_closed = False
        try:
            while True:
                chunk = self.sslobj.read(_READ_CHUNK)
                if not chunk:  # over memory BIOs, b"" is the peer's close_notify
                    peer_closed = True
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            peer_closed = True
        except ssl.SSLError as e:
            self._fail(f"TLS error: {e}")
            return
        self._flush_outgoing()  # a read may answer (a TLS 1.3 key update)
        if chunks:
            self.inner.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if peer_closed:
            # answer with our close_notify (the peer's TLS stack waits for it), then go
            self.inner.eof_received()
            self.close()

    def write(self, data: bytes) -> None:
        if self.closing or not self.established:
            return
        view = memoryview(data)
        try:
            while view:
                n = self.sslobj.write(view)
                view = view[n:]
        except ssl.SSLError as e:
            self._fail(f"TLS error: {e}")
            return
        self._flush_outgoing()

    def _flush_outgoing(self) -> None:
        out = self._outgoing.read()
        if out:
            self.raw.write(out)

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.established:
            with contextlib.suppress(ssl.SSLError):
                self.sslobj.unwrap()  # close_notify
            self._flush_outgoing()
        self.raw.close()

    def _fail(self, reason: str) -> None:
        peer = self.raw.get_extra_info("peername") if self.raw is not None else None
        log.warning("closing TLS connection from %s: %s", peer, reason)
        self.closing = True
        self.raw.abort()
        # abort() reports connection_lost to us, and we to the Kafka connection
