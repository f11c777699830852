"""FastAPI admin surface of a node: /groups, /topics, /cluster, /acls, /users, health, metrics.

Thin routers over `app.admin.AdminService` (ACLs and users through its `SecurityAdmin`); its
typed outcomes become HTTP answers in `api.errors`, and a call about a group another node owns
is redirected there (307 keeps the method and body; the CLI follows it, but only to an admin
URL the cluster lists). Who may call what: `api.deps`; asking the other nodes: `api.peers`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import uvicorn
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import errors, ui
from api.deps import MUTATIONS, Caller
from api.errors import raw_path
from api.guards import AdminGuard, allowed_hosts, names
from api.peers import Peers
from api.routers import acls, cluster, groups, topics, users
from api.sessions import ConsoleSessions
from app.admin import AdminService
from app.config import DEFAULTS, advertised_admin_url
from app.runtime.node import CoordinatorNode
from app.security.audit import audit
from app.security.manager import SecurityManager
from app.security.throttle import FailedLogins


def create_app(
    node: CoordinatorNode,
    token: str | None = None,
    security: SecurityManager | None = None,
    settings: Any = None,
) -> FastAPI:
    """`settings` (default: the node's) names the CORS origins; `security` enables HTTP Basic,
    the ACL checks and /acls, /users."""
    if settings is None and node is not None:
        settings = node.settings
    app = FastAPI(
        title="coordinator admin",
        version="0.1.0",
        description="Operate the Kafka group coordinator: groups, static members, topics, "
        "ACLs and SCRAM users.",
    )
    app.state.admin = AdminService(node, security)
    app.state.peers = Peers(app.state.admin)
    app.state.token = token or None
    app.state.security = security
    app.include_router(cluster.router)
    app.include_router(groups.router)
    app.include_router(topics.router)
    app.include_router(acls.router)
    app.include_router(users.router)
    app.include_router(ui.router)
    app.mount("/ui/static", ui.static, name="ui-static")
    app.state.ui_sessions = ConsoleSessions[Caller](ui.COOKIE_TTL_S)
    delay_ms = getattr(
        settings, "failed_authentication_delay_ms", DEFAULTS.failed_authentication_delay_ms
    )
    app.state.logins = security.logins if security else FailedLogins(delay_ms / 1000)

    errors.install(app)
    app.add_middleware(AuditMutations)
    origins = cors_origins(getattr(settings, "admin_cors_origins", "") or "")
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
            allow_credentials=False,  # the Authorization header is sent explicitly
        )
    app.add_middleware(RoutedOnRawPath)
    app.add_middleware(
        AdminGuard,
        hosts=allowed_hosts(settings, _advertised(settings)),
        cors_origins=origins,
        max_body_bytes=getattr(settings, "admin_max_body_bytes", DEFAULTS.admin_max_body_bytes),
    )
    return app


def _advertised(settings: Any) -> str | None:
    try:
        return advertised_admin_url(settings) if settings is not None else None
    except ValueError:  # refused at start (cli/serve.py) before any app is made
        return None


def uvicorn_config(app: FastAPI, settings: Any, **overrides: Any) -> uvicorn.Config:
    """The admin listener as `coordinator serve` runs it. Proxy headers only from
    COORD_ADMIN_TRUSTED_PROXIES: uvicorn would trust X-Forwarded-For from 127.0.0.1."""
    host, port = settings.admin_address
    trusted = names(settings.admin_trusted_proxies)
    values: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "lifespan": "off",
        "ssl_certfile": settings.admin_ssl_certfile or None,
        "ssl_keyfile": settings.admin_ssl_keyfile or None,
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or [],
        "server_header": False,
        "limit_concurrency": settings.admin_max_connections,
    }
    values.update(overrides)
    return uvicorn.Config(app, **values)


def cors_origins(value: str) -> list[str]:
    """COORD_ADMIN_CORS_ORIGINS: a comma list of origins; empty = no CORS headers at all."""
    return [o.rstrip("/") for o in names(value)]


class AuditMutations:
    """One audit line per admin mutation, once it has been answered: the route's action, the
    caller, the source address, the resource, the outcome and the HTTP status. 401s and 403s
    were written already by the checks (api.deps), with their reason."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATIONS:
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # only routes that authenticated (not a 404 for an unknown path) and not yet told
            if state.get("action") and not state.get("audited"):
                caller = state.get("caller")
                client = scope.get("client")
                outcome = (
                    "success"
                    if status < 300
                    else "redirected"
                    if status in (307, 308)
                    else "failure"
                )
                audit(
                    state["action"],
                    outcome,
                    principal=getattr(caller, "principal", None),
                    source=client[0] if client else None,
                    resource=state.get("resource"),
                    api="admin",
                    request=f"{scope['method']} {scope['path']}",
                    status=status,
                    **(state.get("detail") or {}),
                )


class RoutedOnRawPath:
    """Route on the path the client sent, one segment at a time.

    Starlette decodes the whole path before routing, so a group id holding "/" (sent as %2F)
    would split into two segments: "x/offsets" would read the offsets of group "x". Here each
    segment is decoded on its own and only "%" and "/" stay escaped inside it; the routers undo
    that with `unquote` (`api.routers.groups.param`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("raw_path"):
            segments = raw_path(scope).split("/")
            scope = dict(scope)
            scope["path"] = "/".join(
                unquote(seg).replace("%", "%25").replace("/", "%2F") for seg in segments
            )
        await self.app(scope, receive, send)
