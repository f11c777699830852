"""What every admin request passes before any route: its Host, its Origin and its body's size.

- Host: a browser tricked by DNS rebinding sends the attacker's name in Host while it talks to
  this node's address, so only names this node answers to are served: `localhost`, the address
  the connection arrived on, the host of COORD_ADMIN_LISTEN and of COORD_ADVERTISED_ADMIN_URL,
  and COORD_ADMIN_ALLOWED_HOSTS (what a reverse proxy forwards).
- Origin: a request a browser sends from another site says so; it is refused unless that
  origin is listed in COORD_ADMIN_CORS_ORIGINS. Requests without Origin (curl, the CLI, the
  nodes) and the console's own same-origin calls pass.
- Body: at most COORD_ADMIN_MAX_BODY_BYTES, counted as it arrives (a 413 before it is parsed),
  so no request can make the loop every Kafka client shares parse megabytes of JSON.

The proxy headers (X-Forwarded-For, -Proto) are uvicorn's, read only from the addresses in
COORD_ADMIN_TRUSTED_PROXIES (`uvicorn_config`): otherwise a client could pick the source
address its ACLs and audit lines are judged by.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES: Final = frozenset({"localhost"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def names(value: str) -> list[str]:
    """A comma list setting: its entries, stripped, empty ones left out."""
    return [v.strip() for v in value.split(",") if v.strip()]


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's (name, port): lower-cased, IPv6 brackets removed; None if malformed."""
    try:
        parts = urlsplit("//" + value)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return None
    return parts.hostname.lower(), port


def _canonical(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def allowed_hosts(settings: Any, advertised: str | None) -> frozenset[str]:
    """The names this node's admin API answers to (beside the connection's own address)."""
    out = set(LOOPBACK_NAMES)
    listen_host = getattr(settings, "admin_address", ("", 0))[0]
    if listen_host not in ("", "0.0.0.0", "::"):
        out.add(_canonical(listen_host))
    if advertised:
        hostname = urlsplit(advertised).hostname
        if hostname:
            out.add(_canonical(hostname))
    for name in names(getattr(settings, "admin_allowed_hosts", "") or ""):
        out.add(_canonical(name.removeprefix("[").removesuffix("]")))
    return frozenset(out)


def _origin(scheme: str, host: str, port: int | None) -> tuple[str, str, int | None]:
    return scheme, host, port if port is not None else _DEFAULT_PORTS.get(scheme)


class BodyTooLarge(HTTPException):
    """Raised while the body arrives: an HTTPException, so the routes answer it as a 413."""


class AdminGuard:
    """The Host, Origin and body-size checks of every HTTP request (see the module's text)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Iterable[str],
        cors_origins: Iterable[str],
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self.hosts = frozenset(hosts)
        self.cors = frozenset(o.lower() for o in cors_origins)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        host_value = headers.get(b"host", b"").decode("latin-1")
        host = split_host(host_value) if host_value else None
        if host is None or not self._host_allowed(host[0], scope):
            shown = host_value[:100] or "none"
            await _refuse(send, 400, f"this node does not answer to Host {shown!r}; list the "
                          "name in COORD_ADMIN_ALLOWED_HOSTS if a proxy forwards it")  # fmt: skip
            return
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1"), scope, host):
            await _refuse(send, 403, "cross-origin request refused: the origin is not in "
                          "COORD_ADMIN_CORS_ORIGINS")  # fmt: skip
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _refuse(send, 413, self._too_large())
            return
        await self._bounded(scope, receive, send)

    def _host_allowed(self, name: str, scope: Scope) -> bool:
        name = _canonical(name)
        if name in self.hosts:
            return True
        server = scope.get("server")
        return server is not None and name == _canonical(str(server[0]))

    def _origin_allowed(self, origin: str, scope: Scope, host: tuple[str, int | None]) -> bool:
        if origin.rstrip("/").lower() in self.cors:
            return True
        try:
            parts = urlsplit(origin)
            got = _origin(parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)
        except ValueError:
            return False
        return got == _origin(str(scope.get("scheme", "http")), host[0], host[1])

    def _too_large(self) -> str:
        return f"the request body is over {self.max_body_bytes} bytes (COORD_ADMIN_MAX_BODY_BYTES)"

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(413, self._too_large())
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except BodyTooLarge:
            if not started:
                await _refuse(send, 413, self._too_large())


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
