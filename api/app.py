"""FastAPI admin surface of a node: /groups, /topics, /cluster, health and metrics.

Thin routers over `app.admin.AdminService`; a call about a group another node owns is
redirected there (307 keeps the method and body; the CLI follows it).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any
from urllib.parse import quote, unquote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from api.routers import cluster, groups, topics
from app.admin import AdminError, AdminService, Elsewhere
from app.runtime.node import CoordinatorNode


def create_app(node: CoordinatorNode, token: str | None = None) -> FastAPI:
    app = FastAPI(
        title="coordinator admin",
        version="0.1.0",
        description="Operate the Kafka group coordinator: groups, static members, topics.",
    )
    app.state.admin = AdminService(node, token)
    app.state.token = token or None
    app.include_router(cluster.router)
    app.include_router(groups.router)
    app.include_router(topics.router)

    @app.exception_handler(AdminError)
    async def admin_error(_: Request, exc: AdminError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(Elsewhere)
    async def elsewhere(request: Request, exc: Elsewhere) -> Response:
        if not exc.admin_url:
            return JSONResponse(
                {"detail": f"owned by node {exc.node_id}, whose admin URL is unknown"},
                status_code=503,
            )
        # the path exactly as the client sent it: decoding it here and again on the next node
        # would turn group "a%61" into "aa"
        target = exc.admin_url.rstrip("/") + raw_path(request.scope)
        if request.url.query:
            target += "?" + request.url.query
        return RedirectResponse(target, status_code=307)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return JSONResponse({"detail": problems or "invalid request"}, status_code=422)

    app.add_middleware(RoutedOnRawPath)
    return app


def raw_path(scope: MutableMapping[str, Any]) -> str:
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(scope["path"])


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
