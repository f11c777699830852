"""The authentication room of the wire edge: TLS and SASL before anything else is served.

`GatedConnection` is a `FramedConnection` that knows who is asking. On a TLS listener the
handshake (app/security/tls.py) comes first and the client certificate names the principal;
on a SASL listener only the requests the API rows mark `before_authentication` (ApiVersions and
the SASL exchange) are served until the session is authenticated, in frames no larger than
Kafka's sasl.server.max.receive.size; anything else closes the connection. A failed
authentication is answered, then the connection ends a moment later. What a frame asks for
is the subclass's (`on_request`); the gate only reads a request's API key.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any, Final

from app.kafka.connection import SIZE, ConnectionOwner, FramedConnection
from app.security.listeners import Listener
from app.security.manager import SecurityManager
from app.security.principal import ANONYMOUS, certificate_principal
from app.security.session import AuthSession

# api_key, api_version, correlation_id: every request header starts so
REQUEST_PREFIX: Final = struct.Struct(">hhi")
_API_KEY: Final = struct.Struct(">h")
# Kafka's sasl.server.max.receive.size: the largest frame before authentication
PRE_AUTH_MAX_FRAME: Final = 512 * 1024


class GatedConnection(FramedConnection):
    def __init__(
        self,
        owner: ConnectionOwner,
        listener: Listener,
        security: SecurityManager | None,
        before_authentication: frozenset[int],
        api_name: Callable[[int], str],
    ) -> None:
        super().__init__(owner)
        self.listener = listener.name
        # who is asking: ANONYMOUS until a certificate or SASL says otherwise (Kafka's rule)
        self.principal = ANONYMOUS
        self._session: AuthSession | None = None
        self.authenticated = not listener.protocol.tls and not listener.protocol.sasl
        self._before_authentication_apis = before_authentication
        self._api_name = api_name
        if listener.protocol.sasl:
            assert security is not None
            self._session = AuthSession(security)
            self._max_frame = min(PRE_AUTH_MAX_FRAME, self._max_frame)

    def on_request(self, frame: bytes) -> None:
        """Serve one request (`frame` holds at least its header's prefix), once the gate let
        it through."""
        raise NotImplementedError

    def on_frame(self, frame: bytes) -> None:
        if len(frame) < REQUEST_PREFIX.size:
            self.abort(f"frame of {len(frame)} bytes is shorter than a request header")
            return
        if not self.authenticated and not self._before_authentication(frame):
            return
        self.on_request(frame)

    def tls_established(self, peercert: dict[str, Any] | None) -> None:
        """The TLS handshake is done (TlsLayer). Without SASL, the client certificate's
        subject is the principal (Kafka's default mapping), or ANONYMOUS without one."""
        if self._session is None:
            self.principal = certificate_principal(peercert) if peercert else ANONYMOUS
            self.authenticated = True

    def _authenticated_by_sasl(self, session: AuthSession) -> None:
        self.principal = session.principal
        self.authenticated = True
        self._max_frame = self._server.limits.max_frame_bytes

    def _before_authentication(self, frame: bytes) -> bool:
        """Kafka's rule for a SASL listener: before authentication only ApiVersions and the
        SASL requests are served; anything else closes the connection. True: serve `frame`."""
        session = self._session
        if session is None:
            self.abort("request before the TLS handshake completed")
            return False
        if session.authenticated:
            self._authenticated_by_sasl(session)
            return True
        if session.raw_tokens and session.server is not None:
            self._raw_token(session, frame)  # after SaslHandshake v0: the frame is the token
            return False
        (api_key,) = _API_KEY.unpack_from(frame, 0)
        if api_key not in self._before_authentication_apis:
            self.abort(f"{self._api_name(api_key)} request before SASL authentication")
            return False
        return True

    def _raw_token(self, session: AuthSession, token: bytes) -> None:
        slot = self.reserve()
        assert self._loop is not None
        task = self._loop.create_task(session.step(token, self.ip), name="sasl-token")

        def done(task: asyncio.Task[bytes]) -> None:
            if self._closing:
                return
            if task.cancelled() or task.exception() is not None:
                self.abort(f"SASL authentication failed: {task.exception()}")
                return
            reply = task.result()
            self.fill(slot, SIZE.pack(len(reply)) + reply)

        task.add_done_callback(done)

    def _send(self) -> bool:
        wrote = super()._send()
        session = self._session
        if wrote and session is not None and session.failed and self._loop is not None:
            # a failed authentication is answered, then the connection ends, a moment later
            # so the client reads the answer first (Kafka's
            # connection.failed.authentication.delay.ms)
            self._closing = True
            assert self._transport is not None
            self._transport.pause_reading()
            self._loop.call_later(session.security.logins.delay_s, self._transport.close)
        return wrote
